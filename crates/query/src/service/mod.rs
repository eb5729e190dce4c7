//! The query service: validated request in, JSON response out. Independent of the
//! Lambda runtime: [`QueryService::handle`] takes any `http::Request`, so the Lambda,
//! the local runner and tests share it.
//!
//! The service reads no clock. Each request comes with `now`, the wall clock its edge
//! read once through `store::clock` (the Lambda's [`crate::lambda::handle_apigw`], the
//! local runner, a test), which dates the shard directory's cache and the density an
//! earlier read saw; and with an optional deadline its reads stop by.
//!
//! A reading can be stored under more than one partition key (fan-out keys nest, and a
//! redelivery after a raise keys it with the larger fan-out). Every answer shows it
//! once: range reads and stats merge by the reading's identity and drop copies (see
//! [`crate::exec`]), and a single-reading lookup stops at the first key that holds it.
//!
//! # Pipeline
//! A request is validated ([`parse_request`]: every 4xx before any read), bounded by
//! its deadline ([`QueryService::execute_by`]), routed to its route's module, and its
//! answer or error becomes the JSON response (`answer`). One module per route:
//! - `readings`: `GET /devices/{device_id}/readings` and `GET /readings`, merged range
//!   reads a page at a time;
//! - `point`: `GET /devices/{device_id}/readings/{event_id}`, one reading by its keys;
//! - `latest`: `GET /devices/{device_id}/latest`, the device's newest reading, the
//!   range read newest first, stopped at its first reading;
//! - `stats`: `GET /devices/{device_id}/stats`, buckets of one metric, from the sealed
//!   cells (`sealed`) of the hours the sealer sealed and the readings of the rest;
//! - `shards`: `GET /devices/{device_id}/shards`, the layout and fan-out histories;
//! - `devices`: `GET /devices`, the device list, from the sealer's directory;
//! - `fleet`: `GET /stats`, the fleet's buckets, from the sealer's fleet parts;
//! - `series`: `GET /devices/{device_id}/series` and `GET /series`, the two stats as
//!   points of one metric, in one answer;
//!
//! and `plan` turns a validated range into the read plan's merge streams; `rollups`
//! reads the sealer's table (`ROLLUP_TABLE`), within the budgets.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use http::Response;
use sharding::epoch::TableHistory;
use sharding::time::Timestamp;
use store::directory::{CachedDirectory, DeviceLayout, ShardReader};
use store::read::ReadingSource;

use crate::budget::RequestBudget;
use crate::cursor::{CursorKeyRing, CursorKeys};
use crate::error::ApiError;
use crate::exec::ReadCost;
use crate::params::{Endpoint, Limits, parse_request};
use crate::scope::ReadScope;
use crate::stats::StatsBudget;

mod answer;
mod devices;
mod fleet;
mod latest;
mod plan;
mod point;
mod readings;
mod rollups;
mod sealed;
mod seen;
mod series;
mod shards;
mod slabs;
mod stats;

pub use answer::{error_response, store_error};
pub use fleet::FLEET_PAGE_HOURS;
pub use latest::look_back;
pub use plan::{specs, specs_with_index};

use devices::DevicesRequest;
use fleet::FleetRequest;
use point::Point;
use readings::{DensityHint, Devices};
use rollups::Rollups;
use stats::StatsRequest;

/// Readings a stats read plans each round for, by default
/// ([`ServiceConfig::stats_window`]).
pub const DEFAULT_STATS_WINDOW: usize = 5_000;

/// Settings of the service.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub limits: Limits,
    /// Most Query calls in flight for one request.
    pub concurrency: usize,
    /// The keys that seal and open cursors, replaced whole after a rotation.
    pub cursor_keys: CursorKeyRing,
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
    /// The JWT claim that lists the devices a caller may read (`crate::scope`); `None`:
    /// every caller the authorizer lets through reads every device.
    pub scope_claim: Option<String>,
}

impl ServiceConfig {
    /// Defaults: the limits of [`Limits::default`], 32 Queries in flight, 60 s
    /// directory cache, 200,000 readings buffered at most, stats read 5,000 readings a
    /// round.
    pub fn new(cursor_keys: impl Into<CursorKeys>) -> Self {
        Self {
            limits: Limits::default(),
            concurrency: 32,
            cursor_keys: CursorKeyRing::new(cursor_keys),
            directory_ttl: Duration::from_secs(60),
            retry_after_secs: 1,
            max_buffered: 200_000,
            time_index: None,
            stats_window: DEFAULT_STATS_WINDOW,
            stats_budget: StatsBudget::default(),
            budget: RequestBudget::default(),
            scope_claim: None,
        }
    }
}

/// One HTTP request's parts, as routed: the method, the path (percent-encoded, as in
/// a URI) and the raw query string.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
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

/// The query API over a reading source and the shard metadata.
#[derive(Debug)]
pub struct QueryService<S, D> {
    source: S,
    directory: CachedDirectory<D>,
    config: ServiceConfig,
    /// What the last read over every device saw of its streams' density: the next
    /// such read plans its first round by it.
    every_device_density: Mutex<Option<DensityHint>>,
    /// The sealer's derived items (`ROLLUP_TABLE`), which `GET /devices`, `GET /stats`
    /// and `GET /series` read, and the device stats and series read for the hours
    /// sealed; `None`: the first three answer 501, the others read the readings alone.
    rollups: Option<Rollups>,
}

/// A route's answer: the JSON body, written ([`answer::json_body`]), and what it cost,
/// or the error to answer with. Written straight from the model, never through a
/// `serde_json::Value`, which would carry a metric's number through a double.
type Answer = Result<(String, ReadStats), ApiError>;

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    pub fn new(source: S, shards: D, config: ServiceConfig) -> Self {
        Self {
            directory: CachedDirectory::new(shards, config.directory_ttl),
            source,
            config,
            every_device_density: Mutex::new(None),
            rollups: None,
        }
    }

    /// The service reading the sealer's derived items from `rollups` too
    /// (`ROLLUP_TABLE`): for `GET /devices`, `GET /stats` and `GET /series`, and for a
    /// device's stats and series over the hours sealed.
    #[must_use]
    pub fn with_rollups(self, rollups: impl store::rollup::RollupTable + 'static) -> Self {
        Self {
            rollups: Some(Rollups::new(rollups)),
            ..self
        }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Answers one HTTP request at `now`. Never fails: every outcome is a response.
    pub async fn handle<B>(&self, request: &http::Request<B>, now: Timestamp) -> Response<String> {
        let path = request.uri().path();
        let query = request.uri().query();
        self.handle_parts(request.method().as_str(), path, query, now)
            .await
    }

    /// [`QueryService::handle`] on the request's parts, with no deadline.
    pub async fn handle_parts(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        now: Timestamp,
    ) -> Response<String> {
        self.handle_parts_by(method, path, query, now, None).await
    }

    /// [`QueryService::handle_parts`] for a request that must stop reading by
    /// `deadline` (the Lambda's deadline less the margin, or whatever the caller has).
    pub async fn handle_parts_by(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Response<String> {
        let request = Request {
            method,
            path,
            query,
        };
        self.handle_as(Ok(&ReadScope::Every), request, now, deadline)
            .await
    }

    /// [`QueryService::handle_parts_by`] for a caller that may read `scope`, or whose
    /// token grants no read (`Err`, answered 403 once the request is found valid).
    pub async fn handle_as(
        &self,
        scope: Result<&ReadScope, &ApiError>,
        request: Request<'_>,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Response<String> {
        let Request {
            method,
            path,
            query,
        } = request;
        let answer = match parse_request(method, path, query, &self.config.limits) {
            Ok(endpoint) => match scope {
                Ok(scope) => self.execute_by(scope, endpoint, now, deadline).await,
                Err(refused) => Err(refused.clone()),
            },
            Err(e) => Err(e),
        };
        answer::respond(method, path, answer)
    }

    /// Runs a validated request at `now`, with no deadline, for a caller who may read
    /// every device.
    pub async fn execute(&self, endpoint: Endpoint, now: Timestamp) -> Answer {
        self.execute_by(&ReadScope::Every, endpoint, now, None)
            .await
    }

    /// Runs a validated request at `now` for a caller who may read `scope`, that must
    /// stop reading by `deadline`. A device outside the scope is 403 before anything is
    /// read. The reads stop by the deadline themselves; a lookup of the shard metadata
    /// that outlasts it by the margin is answered 503 rather than left to the
    /// function's timeout.
    pub async fn execute_by(
        &self,
        scope: &ReadScope,
        endpoint: Endpoint,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        if let Some(device) = endpoint.device() {
            scope.check(device)?;
        }
        let last_resort = deadline.map(|d| d + self.config.budget.deadline_margin / 2);
        let run = self.route(scope, endpoint, now, deadline);
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

    async fn route(
        &self,
        scope: &ReadScope,
        endpoint: Endpoint,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        match endpoint {
            Endpoint::DeviceReadings { device, read } => {
                let device = Devices::One(device);
                self.readings("device_readings", device, read, now, deadline)
                    .await
            }
            Endpoint::AllReadings { read } => {
                let devices = Devices::Every(scope.grants());
                self.readings("all_readings", devices, read, now, deadline)
                    .await
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
                self.reading(&point, now, deadline).await
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
                self.stats(&request, now, deadline).await
            }
            Endpoint::Shards { device } => self.shards(&device, now).await,
            Endpoint::Latest { device, consistent } => {
                self.latest(&device, consistent, now, deadline).await
            }
            Endpoint::Devices {
                prefix,
                seen_since_ms,
                limit,
                cursor,
            } => {
                let request = DevicesRequest {
                    prefix: prefix.as_deref(),
                    seen_since_ms,
                    limit,
                    cursor: cursor.as_deref(),
                };
                self.devices(scope, &request, now, deadline).await
            }
            Endpoint::FleetStats {
                range,
                interval_ms,
                metric,
                cursor,
            } => {
                let request = FleetRequest {
                    range,
                    interval_ms,
                    metric: metric.as_deref(),
                    cursor: cursor.as_deref(),
                };
                self.fleet_stats(scope, &request, now, deadline).await
            }
            Endpoint::DeviceSeries {
                device,
                series,
                consistent,
            } => {
                self.device_series(&device, &series, consistent, now, deadline)
                    .await
            }
            Endpoint::FleetSeries { series } => {
                self.fleet_series(scope, &series, now, deadline).await
            }
        }
    }

    /// The table's layout history as of `now`, which dates the shard directory's
    /// cache (`None`: nothing was written yet).
    async fn stored_layout(&self, now: Timestamp) -> Result<Option<TableHistory>, ApiError> {
        self.directory.stored_layout(now).await.map_err(store_error)
    }

    /// The table's layout history, then `device`'s fan-out history, as of `now`; `None`
    /// while no layout is stored.
    async fn device_layout(
        &self,
        device: &str,
        now: Timestamp,
    ) -> Result<Option<DeviceLayout>, ApiError> {
        self.directory
            .device_layout(device, now)
            .await
            .map_err(store_error)
    }
}
