//! The range routes, `GET /devices/{device_id}/readings` and `GET /readings`: a page
//! of readings in time order, merged from the read plan's streams, each reading once,
//! within the request's budgets, with a cursor to the next page.
//!
//! A read over every device plans its first round by the density the last such read
//! saw ([`DensityHint`]), while it is recent.

use std::time::{Duration, Instant};

use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::read_plan::{ReadPlan, plan_all, plan_entity};
use sharding::time::{TimeRange, Timestamp};
use store::directory::ShardReader;
use store::item::ReadingItem;
use store::read::ReadingSource;

use super::answer::{PAGE_OVERHEAD_BYTES, exec_error, json_body, reading_out, store_error};
use super::plan::{plan_error, specs_with_index, to_time_range};
use super::slabs::{less, sum};
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice};
use crate::cursor::{Binding, decode_cursor, encode_cursor};
use crate::error::{ApiError, codes};
use crate::exec::{ExecError, MergedPage, ReadCost, ReadOptions, ReadOutcome, key_of, read_merged};
use crate::model::{ReadingKey, ReadingOut, ReadingsPage};
use crate::params::{Range, ReadParams};
use crate::scope::DeviceGrants;

/// How long a read over every device plans by the density an earlier one saw. A
/// fleet's rate drifts; a wrong hint costs rounds or items read, never an item of the
/// answer (`sharding::merge`, "A density from an earlier read"), and the read it
/// misleads leaves the density it saw for the next.
const DENSITY_HINT_TTL: Duration = Duration::from_secs(60);

/// Which devices a range read answers.
#[derive(Debug, Clone)]
pub(super) enum Devices<'a> {
    /// `GET /devices/{device_id}/readings`: this one (its scope was checked).
    One(String),
    /// `GET /readings`: every device the grants allow (`None`: every device).
    Every(Option<&'a DeviceGrants>),
}

impl Devices<'_> {
    fn one(&self) -> Option<&str> {
        match self {
            Devices::One(device) => Some(device),
            Devices::Every(_) => None,
        }
    }

    /// The grants a read over every device keeps its readings to.
    fn grants(&self) -> Option<&DeviceGrants> {
        match self {
            Devices::One(_) | Devices::Every(None) => None,
            Devices::Every(Some(grants)) => Some(grants),
        }
    }
}

/// Most devices a scoped read over every device reads by their own keys: a token
/// naming at most this many ids (and no prefix) reads those devices' keys alone, at
/// about one Query per device and bucket, rather than every shard of the fleet.
const MAX_DEVICE_PLANS: usize = 20;

/// A density a read saw (items per millisecond of one stream's span), and when.
#[derive(Debug, Clone, Copy)]
pub(super) struct DensityHint {
    density: f64,
    seen_at: Timestamp,
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// A page of one device's readings, or of every device's that the caller may read.
    /// A scoped read over every device reads what an unscoped one reads and keeps the
    /// scope's devices: it is held to the same budgets, so where they are few among
    /// the fleet its pages end early (even empty) with a cursor that moves on.
    pub(super) async fn readings(
        &self,
        route: &'static str,
        devices: Devices<'_>,
        read: ReadParams,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        let device = devices.one();
        let binding = Binding {
            route,
            device: device.map(str::to_owned),
            from_ms: read.range.from_ms,
            to_ms: read.range.to_ms,
            descending: read.descending,
            limit: read.limit,
            detail: String::new(),
            // A scoped read's cursor resumes only under the same scope.
            scope: devices.grants().map(DeviceGrants::canonical),
        };
        // The cursor is opened before any read: a bad one costs nothing.
        let after = match &read.cursor {
            Some(raw) => Some(
                decode_cursor(raw, &binding, &self.config.cursor_keys.get(), now)
                    .map_err(|e| ApiError::bad_cursor(e.to_string()))?,
            ),
            None => None,
        };
        let time_range = to_time_range(resume_range(&read, after.as_ref()))?;
        let Some(table) = self.stored_layout(now).await? else {
            return Ok((page_json(Vec::new(), None)?, ReadStats::default()));
        };
        let plan = self
            .plan_readings(&devices, time_range, &table, now)
            .await?;
        // The slab-held readings of the devices read by their own keys.
        let mut before = ReadCost::default();
        let budget = self.config.budget.read(deadline);
        let mut specs = specs_with_index(&plan, self.config.time_index.as_deref());
        let own = slab_devices(&devices);
        if !own.is_empty() {
            let progress = self
                .slab_progress(&table, time_range, budget, &mut before)
                .await?;
            for id in own {
                let streams = self
                    .slab_streams(id, time_range, &table, progress, now)
                    .await?;
                specs.extend(streams);
            }
        }
        let every_device = device.is_none();
        // The density of the fleet's streams, which a scoped read does not see whole.
        let unscoped = every_device && devices.grants().is_none();
        let hint = if unscoped {
            self.density_hint(now)
        } else {
            None
        };
        let opts = ReadOptions {
            descending: read.descending,
            consistent: read.consistent,
            concurrency: self.config.concurrency,
            max_buffered: self.config.max_buffered,
            budget: less(budget, before),
        };
        let mut room = AnswerRoom::new(self.config.budget.answer_bytes);
        let page = MergedPage {
            limit: read.limit as usize,
            after: after.as_ref(),
            density_hint: hint,
            devices: devices.grants(),
            stop_at_limit: false,
        };
        let planned = specs.len() as u64;
        let mut outcome = read_merged(&self.source, specs, opts, page, |item| room.take(item))
            .await
            .map_err(|e| self.read_error(e, every_device))?;
        outcome.cost = sum(before, outcome.cost);
        if unscoped && let Some(density) = outcome.density {
            self.remember_density(density, now);
        }
        let next_cursor = self
            .next_position(&read, device, after.as_ref(), &outcome)?
            .map(|position| {
                encode_cursor(&position, &binding, &self.config.cursor_keys.get(), now)
            });
        let stats = ReadStats::of(outcome.cost, outcome.items.len() as u64, planned);
        let items = outcome
            .items
            .into_iter()
            .map(reading_out)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((page_json(items, next_cursor)?, stats))
    }

    /// The read plan of one device's readings over `range`, or of every device's: the
    /// entities whose readings can carry a raised key then come from the hot index, and
    /// a scoped read leaves out the raised keys of devices outside its scope (the base
    /// keys, which every device shares, are read whatever the scope).
    async fn plan_readings(
        &self,
        devices: &Devices<'_>,
        range: TimeRange,
        table: &TableHistory,
        now: Timestamp,
    ) -> Result<ReadPlan, ApiError> {
        match devices {
            Devices::One(d) => {
                let fanout = self.directory.fanout(d, now).await.map_err(store_error)?;
                plan_entity(d, range, table, &fanout).map_err(plan_error)
            }
            Devices::Every(Some(grants)) if let Some(ids) = grants.few_ids(MAX_DEVICE_PLANS) => {
                self.plan_devices(ids, range, table, now).await
            }
            Devices::Every(grants) => {
                let hot = self.directory.hot(range, now).await.map_err(store_error)?;
                let refs: Vec<(&str, &FanoutHistory)> = hot
                    .iter()
                    .filter(|(n, _)| grants.is_none_or(|g| g.allows(n)))
                    .map(|(n, h)| (n.as_str(), h))
                    .collect();
                plan_all(range, table, &refs).map_err(plan_error)
            }
        }
    }

    /// The read plans of a few devices over `range`, as one plan: a scoped read over
    /// every device whose token names its devices reads their keys alone.
    async fn plan_devices(
        &self,
        ids: impl Iterator<Item = &str>,
        range: TimeRange,
        table: &TableHistory,
        now: Timestamp,
    ) -> Result<ReadPlan, ApiError> {
        let plans = ids.map(|id| async move {
            let fanout = self.directory.fanout(id, now).await.map_err(store_error)?;
            plan_entity(id, range, table, &fanout).map_err(plan_error)
        });
        let mut queries: Vec<_> = futures::future::try_join_all(plans)
            .await?
            .into_iter()
            .flat_map(|plan| plan.queries)
            .collect();
        // In time order of their first piece, as every plan is.
        queries.sort_by_key(|q| q.covers.from());
        Ok(ReadPlan { queries })
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

    /// The density the last read over every device saw, while it is recent.
    fn density_hint(&self, now: Timestamp) -> Option<f64> {
        let hint = (*self.every_device_density.lock())?;
        let fresh = hint.seen_at <= now && now < hint.seen_at.saturating_add(DENSITY_HINT_TTL);
        fresh.then_some(hint.density)
    }

    fn remember_density(&self, density: f64, now: Timestamp) {
        *self.every_device_density.lock() = Some(DensityHint {
            density,
            seen_at: now,
        });
    }
}

/// The devices a range read reads by their own keys, whose slab-held readings it reads
/// too: the one device, or the few a scoped read over every device names. A read over
/// every device reads the fleet's shards, and no device's slabs.
fn slab_devices<'a>(devices: &'a Devices<'_>) -> Vec<&'a str> {
    match devices {
        Devices::One(device) => vec![device.as_str()],
        Devices::Every(Some(grants)) => grants
            .few_ids(MAX_DEVICE_PLANS)
            .map(Iterator::collect)
            .unwrap_or_default(),
        Devices::Every(None) => Vec::new(),
    }
}

/// The range a read covers: resuming narrows it to what lies after the position; the
/// position's own timestamp stays in (ties at the same ms are dropped by key, and so
/// is every copy of the position's own reading, under whichever key).
fn resume_range(read: &ReadParams, after: Option<&ReadingKey>) -> Range {
    let mut range = read.range;
    if let Some(pos) = after {
        if read.descending {
            range.to_ms = pos.ts_ms + 1;
        } else {
            range.from_ms = pos.ts_ms;
        }
    }
    range
}

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

fn page_json(items: Vec<ReadingOut>, next_cursor: Option<String>) -> Result<String, ApiError> {
    json_body(&ReadingsPage { items, next_cursor })
}
