//! The fleet's stats, `GET /stats`: every device's readings in buckets of a whole
//! number of minutes, from the sealer's fleet parts (`store::rollup`: partition
//! `fleet#{hour}`, one item per part, each with the hour's and each minute's cells of
//! its devices). Never from the readings: only sealed hours are answered, the ones
//! from the first the sealer sealed to its watermark (`store::rollup::watermark::Watermark`).
//! An hour before the first sealed one was never sealed (a late reading into it may
//! even have left a part of one device there), so no bucket that starts before it is
//! answered, as none that ends after the watermark is: the answer's `sealed_from` and
//! `watermark` say which buckets it can hold. The fleet's readings are not read instead
//! (a read over every device of those hours would cost what the parts save).
//!
//! A bucket's cells are the merge of its minutes' cells (or, where the interval is a
//! whole number of hours and the hour lies whole in the range, of its hours'): counts
//! and exact decimal sums add, min and max compare, and the mean is `sum / count`
//! rounded once (`store::rollup::mean`). A device is in exactly one part, so the
//! parts' device counts add up to the distinct devices of each minute and hour; a
//! bucket of several of them answers the largest (distinct devices over several
//! minutes are not kept).
//!
//! A page reads at most [`FLEET_PAGE_HOURS`] hours: one Query an hour (16 items),
//! sent at once up to the service's concurrency, after one GetItem of the watermark,
//! all within the request's budgets. It ends at a bucket boundary, with a cursor to
//! the next page.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::StreamExt as _;
use serde::Serialize;
use serde_json::value::RawValue;
use sharding::epoch::TableHistory;
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::compaction::Compacted;
use store::rollup::fresh::{self, FreshMinute};
use store::rollup::{Cell, Cells, FleetPart, HOUR_MS, MINUTE_MS, PARTS, RollupQuery, keys};

use super::answer::{PAGE_OVERHEAD_BYTES, json_body, store_error};
use super::rollups::{Fetch, Spend, instant, not_configured};
use super::seen::slabs_after;
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice, RequestBudget};
use crate::cursor::{Binding, decode_cursor, encode_cursor};
use crate::error::{ApiError, codes};
use crate::model::ReadingKey;
use crate::params::Range;
use crate::scope::ReadScope;
use store::rollup::watermark::Watermark;

/// Most hours one page of `GET /stats` reads (a week): a Query each.
pub const FLEET_PAGE_HOURS: i64 = 168;

/// A validated fleet stats request.
#[derive(Debug, Clone, Copy)]
pub(super) struct FleetRequest<'a> {
    pub(super) range: Range,
    pub(super) interval_ms: i64,
    pub(super) metric: Option<&'a str>,
    pub(super) cursor: Option<&'a str>,
}

impl FleetRequest<'_> {
    fn binding(&self) -> Binding {
        Binding {
            route: "fleet_stats",
            device: None,
            from_ms: self.range.from_ms,
            to_ms: self.range.to_ms,
            descending: false,
            limit: 0,
            detail: format!(
                "interval={} metric={}",
                self.interval_ms,
                self.metric.unwrap_or("*")
            ),
            // The route answers only a caller who may read every device.
            scope: None,
        }
    }

    pub(super) fn bucket_of(&self, ms: i64) -> i64 {
        ms.div_euclid(self.interval_ms) * self.interval_ms
    }
}

/// One hour of the fleet: the merge of its parts, or its fresh minutes.
#[derive(Debug, Default)]
pub(super) struct HourCells {
    hour: Cells,
    minutes: BTreeMap<u8, Cells>,
    /// Its fresh minutes (`store::rollup::fresh`), not its seal: no cell of the whole
    /// hour, and devices by minute only.
    fresh: bool,
}

impl HourCells {
    /// Merges one part in, keeping only `metric`'s cells when one is asked for.
    fn add(&mut self, part: &FleetPart, metric: Option<&str>) {
        self.hour.merge(&only(&part.hour, metric));
        for (minute, cells) in part.minutes.range(..60) {
            self.minutes
                .entry(*minute)
                .or_default()
                .merge(&only(cells, metric));
        }
    }
}

/// `cells` with only `metric`'s cell, when one is asked for.
fn only(cells: &Cells, metric: Option<&str>) -> Cells {
    match metric {
        None => cells.clone(),
        Some(name) => Cells {
            readings: cells.readings,
            devices: cells.devices,
            metrics: cells
                .metrics
                .get(name)
                .map(|c| BTreeMap::from([(name.to_owned(), c.clone())]))
                .unwrap_or_default(),
        },
    }
}

/// One metric's cell as answered: exact decimals written as their digits.
#[derive(Debug, Serialize)]
struct CellOut {
    count: u64,
    sum: Box<RawValue>,
    min: Box<RawValue>,
    max: Box<RawValue>,
    avg: f64,
}

impl CellOut {
    fn of(cell: &Cell) -> Result<Self, ApiError> {
        let number = |v| {
            RawValue::from_string(store::rollup::decimal_text(v))
                .map_err(|e| ApiError::internal(format!("a sealed number: {e}")))
        };
        Ok(Self {
            count: cell.count,
            sum: number(&cell.sum)?,
            min: number(&cell.min)?,
            max: number(&cell.max)?,
            avg: cell.avg(),
        })
    }
}

#[derive(Debug, Serialize)]
struct BucketOut {
    start: String,
    readings: u64,
    devices: u64,
    metrics: BTreeMap<String, CellOut>,
}

#[derive(Debug, Serialize)]
struct FleetPage {
    buckets: Vec<BucketOut>,
    /// The first sealed hour: no bucket starts before it.
    sealed_from: Option<String>,
    /// The end of the sealed hours: the buckets before it are the record.
    watermark: Option<String>,
    /// The start and end of the fresh minutes after the watermark
    /// (`store::rollup::fresh`): the buckets between count the readings compaction has
    /// read. The start is the watermark, or the first window compacted when later.
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_to: Option<String>,
    next_cursor: Option<String>,
}

/// The fleet's fresh minutes after its sealed hours, read hour by hour.
#[derive(Debug, Default)]
pub(super) struct Fresh {
    pub(super) hours: BTreeMap<i64, HourCells>,
    /// Where they start: the watermark's end, or the compaction's first window when
    /// nothing is sealed yet.
    pub(super) from_ms: i64,
    /// The start of the first minute from `from_ms` without one: `from_ms` when none.
    pub(super) end_ms: i64,
}

/// What the fleet's routes answer from: the sealed hours, then the fresh minutes after
/// them.
#[derive(Debug, Default)]
pub(super) struct FleetSpan {
    pub(super) sealed: Option<Watermark>,
    pub(super) fresh: Fresh,
}

impl FleetSpan {
    /// The minutes a bucket may lie in: from the first sealed hour (or the first fresh
    /// minute) to the end of the fresh minutes (or the watermark); `None` when none. A
    /// bucket of the minutes between the watermark and the first fresh one (slabs
    /// started after the watermark) has no cells, and is left out.
    pub(super) fn answerable(&self) -> Option<Watermark> {
        let from_ms = self.sealed.map_or(self.fresh.from_ms, |s| s.from_ms);
        let end_ms = self
            .sealed
            .map_or(self.fresh.end_ms, |s| s.end_ms.max(self.fresh.end_ms));
        (from_ms < end_ms).then(|| Watermark::span(from_ms, end_ms))
    }

    /// Whether `hour` is answered from its fleet parts (sealed), not its fresh minutes.
    pub(super) fn sealed(&self, hour: i64) -> bool {
        self.sealed.is_some_and(|s| s.seals(hour))
    }

    /// The start and end of the fresh minutes, when there are any.
    pub(super) fn fresh(&self) -> Result<(Option<String>, Option<String>), ApiError> {
        if self.fresh.end_ms <= self.fresh.from_ms {
            return Ok((None, None));
        }
        Ok((
            Some(instant(self.fresh.from_ms)?),
            Some(instant(self.fresh.end_ms)?),
        ))
    }

    /// `hours` read from their fleet parts, with the fresh hours after them.
    pub(super) fn with_fresh(
        &mut self,
        sealed: BTreeMap<i64, HourCells>,
    ) -> BTreeMap<i64, HourCells> {
        let mut hours = std::mem::take(&mut self.fresh.hours);
        hours.extend(sealed);
        hours
    }
}

/// The hours a page reads and the part of the range it answers, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PagePlan {
    pub(super) start: i64,
    pub(super) end: i64,
    /// Where the range ends for this request: the page is the last when `end` is it.
    range_end: i64,
}

impl PagePlan {
    pub(super) fn hours(&self) -> impl Iterator<Item = i64> {
        let first = store::rollup::hour_of(self.start);
        let last = store::rollup::hour_of(self.end - 1);
        (first..=last).step_by(HOUR_MS as usize)
    }
}

/// The page of `request` that starts at `start` over the sealed hours `span`: whole
/// minutes of the range (from rounded up, to rounded down), only buckets that start at
/// or after the first sealed hour and end by the watermark, at most `most_hours` hours
/// and `most_buckets` buckets, ending at a bucket boundary (at least one bucket).
/// `None` when nothing is left to answer.
pub(super) fn plan_page(
    request: &FleetRequest<'_>,
    start: i64,
    span: Watermark,
    most_hours: i64,
    most_buckets: i64,
) -> Option<PagePlan> {
    let from = ceil_to(request.range.from_ms, MINUTE_MS)
        .max(start)
        .max(ceil_to(span.from_ms, request.interval_ms));
    let range_end =
        (request.range.to_ms.div_euclid(MINUTE_MS) * MINUTE_MS).min(request.bucket_of(span.end_ms));
    if from >= range_end {
        return None;
    }
    let interval = request.interval_ms;
    let first_end = request.bucket_of(from) + interval;
    let by_hours = store::rollup::hour_of(from) + most_hours * HOUR_MS;
    let by_buckets = request.bucket_of(from) + most_buckets.max(1) * interval;
    let end = request
        .bucket_of(by_hours.min(by_buckets))
        .max(first_end)
        .min(range_end);
    Some(PagePlan {
        start: from,
        end,
        range_end,
    })
}

fn ceil_to(ms: i64, unit: i64) -> i64 {
    ms.div_euclid(unit) * unit + if ms.rem_euclid(unit) == 0 { 0 } else { unit }
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// A page of the fleet's buckets; 403 unless `scope` grants every device.
    pub(super) async fn fleet_stats(
        &self,
        scope: &ReadScope,
        request: &FleetRequest<'_>,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        if scope.grants().is_some() {
            return Err(ApiError::forbidden(
                "GET /stats counts every device's readings, and the token's device claim \
                 does not grant every device ('*')",
            ));
        }
        let binding = request.binding();
        let start = match request.cursor {
            Some(raw) => {
                decode_cursor(raw, &binding, &self.config.cursor_keys.get(), now)
                    .map_err(|e| ApiError::bad_cursor(e.to_string()))?
                    .ts_ms
            }
            None => request.range.from_ms,
        };
        let table = self
            .rollups
            .as_ref()
            .ok_or_else(|| not_configured("GET /stats"))?;
        let spend = Spend::new(table, self.config.budget.read(deadline));
        let refusal = |budget| budget::refusal(budget, &self.config.budget, Advice::NarrowRange);
        let budget = self.config.budget;
        let until_ms = request.range.to_ms.min(now.as_millis());
        let layout = self.stored_layout(now).await?;
        let fresh = fleet_span(
            &spend,
            layout.as_ref(),
            until_ms,
            most_hours(&budget),
            request.metric,
        );
        let mut fleet = match fresh.await? {
            Fetch::Got(fleet) => fleet,
            Fetch::Cut(budget) => return Err(refusal(budget)),
        };
        let Some(span) = fleet.answerable() else {
            return empty_page(&fleet, &spend);
        };
        let Some(mut plan) = plan_page(
            request,
            start,
            span,
            most_hours(&budget),
            self.config.limits.max_stats_buckets,
        ) else {
            return empty_page(&fleet, &spend);
        };
        let hours: Vec<i64> = plan.hours().filter(|&h| fleet.sealed(h)).collect();
        let read = self.read_hours(&spend, &hours, request.metric).await;
        let mut cells = BTreeMap::new();
        for (hour, fetched) in hours.iter().zip(read) {
            match fetched? {
                Fetch::Got(c) => {
                    cells.insert(*hour, c);
                }
                Fetch::Cut(budget) => {
                    // The page ends at the last bucket boundary before the first hour
                    // it could not read.
                    let end = request.bucket_of(*hour);
                    if end <= plan.start {
                        return Err(refusal(budget));
                    }
                    plan.end = plan.end.min(end);
                    break;
                }
            }
        }
        let cells = fleet.with_fresh(cells);
        let room = budget.answer_bytes.saturating_sub(PAGE_OVERHEAD_BYTES);
        let (buckets, end) = buckets(request, &plan, &cells, room)?;
        let next_cursor = (end < plan.range_end).then(|| {
            let position = ReadingKey {
                ts_ms: end,
                device_id: String::new(),
                event_id: String::new(),
            };
            encode_cursor(&position, &binding, &self.config.cursor_keys.get(), now)
        });
        let stats = ReadStats {
            items_read: spend.evaluated(),
            items_returned: buckets.len() as u64,
            calls: spend.calls(),
            plan_queries: hours.len() as u64,
            rounds: (hours.len() as u64).div_ceil(self.config.concurrency.max(1) as u64),
            duplicates: 0,
        };
        let (fresh_from, fresh_to) = fleet.fresh()?;
        let page = FleetPage {
            buckets,
            sealed_from: fleet.sealed.map(|s| instant(s.from_ms)).transpose()?,
            watermark: fleet.sealed.map(|s| instant(s.end_ms)).transpose()?,
            fresh_from,
            fresh_to,
            next_cursor,
        };
        Ok((json_body(&page)?, stats))
    }
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// Each of `hours`, read at once up to the service's concurrency, in hour order.
    pub(super) async fn read_hours(
        &self,
        spend: &Spend<'_>,
        hours: &[i64],
        metric: Option<&str>,
    ) -> Vec<Result<Fetch<HourCells>, ApiError>> {
        // The futures made first: a stream over a closure would not be `Send`.
        let reads: Vec<_> = hours.iter().map(|&h| read_hour(spend, h, metric)).collect();
        futures::stream::iter(reads)
            .buffered(self.config.concurrency.max(1))
            .collect()
            .await
    }
}

/// Most hours a page reads under `budget`: a Query each, after the watermark's
/// GetItem, each reserving a Query's `Limit` of items.
fn most_hours(budget: &RequestBudget) -> i64 {
    let per_hour = u64::from(PARTS) + 1;
    FLEET_PAGE_HOURS
        .min(i64::try_from(budget.queries.saturating_sub(1)).unwrap_or(i64::MAX))
        .min(i64::try_from(budget.evaluated / per_hour).unwrap_or(i64::MAX))
        .max(1)
}

/// The answer with no bucket: nothing sealed yet, or nothing left of the range.
fn empty_page(fleet: &FleetSpan, spend: &Spend<'_>) -> Answer {
    let (fresh_from, fresh_to) = fleet.fresh()?;
    let page = FleetPage {
        buckets: Vec::new(),
        sealed_from: fleet.sealed.map(|s| instant(s.from_ms)).transpose()?,
        watermark: fleet.sealed.map(|s| instant(s.end_ms)).transpose()?,
        fresh_from,
        fresh_to,
        next_cursor: None,
    };
    let stats = ReadStats {
        calls: spend.calls(),
        items_read: spend.evaluated(),
        ..ReadStats::default()
    };
    Ok((json_body(&page)?, stats))
}

/// The sealed hours (the watermark's GetItem) and, when `until_ms` (the range's end, or
/// now) lies past them, the fresh minutes after them: one GetItem of the compaction
/// progress (none: no slabs, no fresh minute), then from the watermark (or the first
/// window compacted, when later) one Query an hour (`store::rollup::fresh`), hour by
/// hour until the first minute without one, over at most `most_hours` hours. A budget
/// that stops the fresh reads leaves the minutes read before it: the answer then
/// reaches less far.
pub(super) async fn fleet_span(
    spend: &Spend<'_>,
    table: Option<&TableHistory>,
    until_ms: i64,
    most_hours: i64,
    metric: Option<&str>,
) -> Result<Fetch<FleetSpan>, ApiError> {
    let sealed = match spend.sealed_span().await? {
        Fetch::Got(span) => span,
        Fetch::Cut(budget) => return Ok(Fetch::Cut(budget)),
    };
    let nothing_fresh = |sealed: Option<Watermark>| {
        let end = sealed.map_or(0, |s| s.end_ms);
        FleetSpan {
            sealed,
            fresh: Fresh {
                hours: BTreeMap::new(),
                from_ms: end,
                end_ms: end,
            },
        }
    };
    let sealed_end = sealed.map_or(0, |s| s.end_ms);
    let slabs = table.is_some_and(|t| slabs_after(t, sealed_end, at(until_ms)));
    if until_ms <= sealed_end || !slabs {
        return Ok(Fetch::Got(nothing_fresh(sealed)));
    }
    let key = keys::compaction();
    let first_window = match spend.get(&key.pk, &key.sk).await? {
        Fetch::Got(Some(item)) => Compacted::of(&item).map_err(store_error)?.from_ms,
        // Nothing compacted (no slabs), or no budget left to ask: no fresh minute.
        Fetch::Got(None) | Fetch::Cut(_) => return Ok(Fetch::Got(nothing_fresh(sealed))),
    };
    // From the watermark, or from the first window compacted when slabs started after
    // it: the minutes between are neither sealed nor fresh, and are not answered.
    let from_ms = sealed.map_or(first_window, |s| s.end_ms.max(first_window));
    let mut fresh = Fresh {
        hours: BTreeMap::new(),
        from_ms,
        end_ms: from_ms,
    };
    let mut starts: Vec<i64> = Vec::new();
    let most_hours = usize::try_from(most_hours).unwrap_or(usize::MAX);
    let hours =
        fresh::hours(from_ms, until_ms).take(if until_ms > from_ms { most_hours } else { 0 });
    'hours: for hour in hours {
        let mut q = RollupQuery::partition(fresh::partition(hour), false);
        let mut cells = HourCells {
            fresh: true,
            ..HourCells::default()
        };
        loop {
            // Every minute of the hour, and one more: one page.
            let page = match spend.query(&q, 61).await? {
                Fetch::Got(page) => page,
                Fetch::Cut(_) => {
                    fresh.hours.insert(hour, cells);
                    break 'hours;
                }
            };
            for item in &page.items {
                let minute = FreshMinute::of(item).map_err(store_error)?;
                if minute.start_ms < from_ms {
                    continue;
                }
                let m = u8::try_from((minute.start_ms - hour) / MINUTE_MS).unwrap_or(u8::MAX);
                // No cell of the whole hour: a fresh hour is answered by its minutes.
                cells.minutes.insert(m, only(&minute.cells, metric));
                starts.push(minute.start_ms);
            }
            match page.last_sk {
                Some(last) => q.after = Some(last),
                None => break,
            }
        }
        fresh.hours.insert(hour, cells);
        if fresh::fresh_end(starts.iter().copied(), from_ms) < hour + HOUR_MS {
            break;
        }
    }
    fresh.end_ms = fresh::fresh_end(starts, from_ms);
    Ok(Fetch::Got(FleetSpan { sealed, fresh }))
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap_or(Timestamp::MAX)
}

/// One hour's parts, merged; cut when a budget stops a Query of it.
async fn read_hour(
    spend: &Spend<'_>,
    hour: i64,
    metric: Option<&str>,
) -> Result<Fetch<HourCells>, ApiError> {
    let mut q = RollupQuery::partition(keys::fleet_hour(hour), false);
    let mut cells = HourCells::default();
    loop {
        // One more than the parts, so that a whole hour comes in one page.
        let page = match spend.query(&q, u64::from(PARTS) + 1).await? {
            Fetch::Got(page) => page,
            Fetch::Cut(budget) => return Ok(Fetch::Cut(budget)),
        };
        for item in &page.items {
            cells.add(&item.body::<FleetPart>().map_err(store_error)?, metric);
        }
        match page.last_sk {
            Some(last) => q.after = Some(last),
            None => return Ok(Fetch::Got(cells)),
        }
    }
}

/// The buckets of `plan` from the hours read, those with readings, as many as fit
/// `room` bytes; and where they end (a bucket boundary, or the plan's end).
fn buckets(
    request: &FleetRequest<'_>,
    plan: &PagePlan,
    hours: &BTreeMap<i64, HourCells>,
    mut room: usize,
) -> Result<(Vec<BucketOut>, i64), ApiError> {
    let interval = request.interval_ms;
    let mut out = Vec::new();
    let mut bucket = request.bucket_of(plan.start);
    while bucket < plan.end {
        let (cells, devices) = bucket_cells(interval, plan, hours, bucket);
        if cells.readings > 0 {
            let metrics = cells
                .metrics
                .iter()
                .map(|(name, cell)| Ok((name.clone(), CellOut::of(cell)?)))
                .collect::<Result<_, ApiError>>()?;
            let b = BucketOut {
                start: instant(bucket)?,
                readings: cells.readings,
                devices,
                metrics,
            };
            let size = budget::json_len(&b) + 1;
            if size > room {
                if out.is_empty() {
                    return Err(ApiError::bad_request(
                        codes::BUDGET_EXCEEDED,
                        "one bucket alone exceeds the answer budget (QUERY_MAX_ANSWER_BYTES); \
                         ask for one metric, or a shorter interval",
                    ));
                }
                return Ok((out, bucket));
            }
            room -= size;
            out.push(b);
        }
        bucket += interval;
    }
    Ok((out, plan.end))
}

/// The cells of the bucket starting at `bucket` (the part of it inside `plan`), and the
/// most devices of any one unit of it (its hours for a whole-hour interval and an hour
/// it holds whole, its minutes otherwise).
pub(super) fn bucket_cells(
    interval: i64,
    plan: &PagePlan,
    hours: &BTreeMap<i64, HourCells>,
    bucket: i64,
) -> (Cells, u64) {
    let whole_hours = interval % HOUR_MS == 0;
    let (lo, hi) = (bucket.max(plan.start), (bucket + interval).min(plan.end));
    let mut cells = Cells::default();
    let mut devices = 0;
    let mut hour = store::rollup::hour_of(lo);
    while hour < hi {
        let (a, b) = (hour.max(lo), (hour + HOUR_MS).min(hi));
        if let Some(h) = hours.get(&hour) {
            if whole_hours && !h.fresh && (a, b) == (hour, hour + HOUR_MS) {
                cells.merge(&h.hour);
                devices = devices.max(h.hour.devices);
            } else {
                let minutes = ((a - hour) / MINUTE_MS) as u8..((b - hour) / MINUTE_MS) as u8;
                for m in h.minutes.range(minutes).map(|(_, m)| m) {
                    cells.merge(m);
                    devices = devices.max(m.devices);
                }
            }
        }
        hour += HOUR_MS;
    }
    (cells, devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = HOUR_MS;

    fn request(from: i64, to: i64, interval: i64) -> FleetRequest<'static> {
        FleetRequest {
            range: Range {
                from_ms: from,
                to_ms: to,
            },
            interval_ms: interval,
            metric: None,
            cursor: None,
        }
    }

    /// Sealed from the epoch to `end_ms`.
    fn span(end_ms: i64) -> Watermark {
        Watermark::span(0, end_ms)
    }

    #[test]
    fn a_page_is_whole_buckets_before_the_watermark_within_its_hours() {
        let r = request(0, 31 * 24 * H, H);
        let p = plan_page(&r, 0, span(10 * 24 * H), 168, 10_000).unwrap();
        assert_eq!((p.start, p.end, p.range_end), (0, 168 * H, 240 * H));
        assert_eq!(p.hours().count(), 168);
        // A day's bucket ends by the watermark, or is not answered.
        let r = request(0, 31 * 24 * H, 24 * H);
        let p = plan_page(&r, 0, span(50 * H), 168, 10_000).unwrap();
        assert_eq!((p.end, p.range_end), (48 * H, 48 * H));
        // A bucket longer than the page's hours is read whole.
        let p = plan_page(&r, 0, span(500 * H), 10, 10_000).unwrap();
        assert_eq!(p.end, 24 * H);
        // Minutes of the range that are whole: from rounded up, to rounded down.
        let r = request(MINUTE_MS + 1, 5 * MINUTE_MS - 1, MINUTE_MS);
        let p = plan_page(&r, r.range.from_ms, span(H), 168, 10_000).unwrap();
        assert_eq!((p.start, p.end), (2 * MINUTE_MS, 4 * MINUTE_MS));
        // The bucket cap ends a page too.
        let r = request(0, 24 * H, MINUTE_MS);
        let p = plan_page(&r, 0, span(24 * H), 168, 90).unwrap();
        assert_eq!(p.end, 90 * MINUTE_MS);
        assert_eq!(p.hours().collect::<Vec<_>>(), vec![0, H]);
        assert_eq!(plan_page(&r, 24 * H, span(24 * H), 168, 90), None);
    }

    #[test]
    fn no_bucket_starts_before_the_first_sealed_hour() {
        let sealed = Watermark::span(5 * H, 10 * H);
        let r = request(0, 24 * H, H);
        let p = plan_page(&r, 0, sealed, 168, 10_000).unwrap();
        assert_eq!((p.start, p.end), (5 * H, 10 * H));
        assert_eq!(p.hours().next(), Some(5 * H), "no hour before it is read");
        // A bucket across the first sealed hour is left out, as one across the
        // watermark is: the first bucket of 2 h starts at 6 h.
        let r = request(0, 24 * H, 2 * H);
        let p = plan_page(&r, 0, sealed, 168, 10_000).unwrap();
        assert_eq!((p.start, p.end), (6 * H, 10 * H));
        // A range before it: nothing to answer.
        let r = request(0, 5 * H, MINUTE_MS);
        assert_eq!(plan_page(&r, 0, sealed, 168, 10_000), None);
    }
}
