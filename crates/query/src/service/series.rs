//! The series routes, `GET /devices/{device_id}/series` and `GET /series`: one metric
//! as `[epoch_ms, value]` points, the shape Grafana's JSON data sources (Infinity)
//! read, in one answer of at most `crate::params::MAX_SERIES_POINTS` points.
//!
//! A device's series is its stats (`super::stats`: the sealed cells of the hours the
//! sealer sealed, the readings of the rest) read as one page; the fleet's is its stats
//! (`super::fleet`: the sealed fleet parts, no bucket before the first sealed hour nor
//! after the watermark) read as one page. There is no cursor: a series that one answer cannot hold within the request's
//! budgets is refused with 400 `budget_exceeded`, naming the budget, never cut short
//! and never left to time out. Where a budget is known to be too small before any
//! read (the fleet's Queries, one an hour), nothing is read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::value::RawValue;
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{Cell, PARTS, decimal_text};

use super::answer::json_body;
use super::fleet::{FleetRequest, bucket_cells, fleet_span, plan_page};
use super::rollups::{Fetch, Spend, instant, not_configured};
use super::stats::CellsRead;
use super::{Answer, QueryService, ReadStats};
use crate::budget::RequestBudget;
use crate::error::{ApiError, codes};
use crate::exec::Exhausted;
use crate::params::{Agg, MAX_SERIES_POINTS, SeriesParams};
use crate::scope::ReadScope;
use crate::stats::{PageEnd, Pager, StatsBudget};

/// One point's value: a double (avg), an integer (count) or an exact decimal's digits
/// (sum, min, max: the stats' own figures, as sent).
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Value {
    Number(f64),
    Count(u64),
    Exact(Box<RawValue>),
}

impl Value {
    fn of(cell: &Cell, agg: Agg) -> Result<Self, ApiError> {
        let exact = |v| {
            RawValue::from_string(decimal_text(v))
                .map(Value::Exact)
                .map_err(|e| ApiError::internal(format!("a sealed number: {e}")))
        };
        match agg {
            Agg::Avg => Ok(Value::Number(cell.avg())),
            Agg::Min => exact(&cell.min),
            Agg::Max => exact(&cell.max),
            Agg::Count => Ok(Value::Count(cell.count)),
            Agg::Sum => exact(&cell.sum),
        }
    }
}

#[derive(Debug, Serialize)]
struct SeriesOut<'a> {
    metric: &'a str,
    agg: &'static str,
    interval_ms: i64,
    points: Vec<(i64, Value)>,
    /// The fleet's: the first sealed hour, no point's bucket starts before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    sealed_from: Option<Option<String>>,
    /// The fleet's: the end of the sealed hours; the points from it on count the
    /// fresh minutes'.
    #[serde(skip_serializing_if = "Option::is_none")]
    watermark: Option<Option<String>>,
    /// The fleet's: the start and end of the fresh minutes after the watermark, no
    /// point at or after the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_to: Option<String>,
}

impl<'a> SeriesOut<'a> {
    fn new(series: &'a SeriesParams) -> Self {
        Self {
            metric: &series.metric,
            agg: series.agg.name(),
            interval_ms: series.interval_ms,
            points: Vec::new(),
            sealed_from: None,
            watermark: None,
            fresh_from: None,
            fresh_to: None,
        }
    }

    /// The answer, unless it passes the answer budget.
    fn body(&self, budget: &RequestBudget) -> Result<String, ApiError> {
        let body = json_body(self)?;
        if body.len() > budget.answer_bytes {
            return Err(ApiError::bad_request(
                codes::BUDGET_EXCEEDED,
                format!(
                    "the series is {} bytes, more than the answer budget of {} \
                     (QUERY_MAX_ANSWER_BYTES), and a series is one answer: ask for a longer \
                     interval_ms",
                    body.len(),
                    budget.answer_bytes
                ),
            ));
        }
        Ok(body)
    }
}

/// 400 `budget_exceeded`: the series needs more than `budget` allows; `way_out` says
/// what reads less.
fn refusal(budget: Exhausted, limits: &RequestBudget, time: Duration, way_out: &str) -> ApiError {
    let spent = match budget {
        Exhausted::Queries => format!(
            "the series needs more than {} Query and GetItem calls (QUERY_MAX_QUERIES)",
            limits.queries
        ),
        Exhausted::Evaluated => format!(
            "the series needs DynamoDB to evaluate more than {} items (QUERY_MAX_EVALUATED)",
            limits.evaluated
        ),
        Exhausted::Time => format!(
            "the series' reads outlasted their time budget ({} s, twice STATS_MAX_SECS, or \
             the function's deadline less QUERY_DEADLINE_MARGIN_MS)",
            time.as_secs_f64()
        ),
    };
    ApiError::bad_request(
        codes::BUDGET_EXCEEDED,
        format!("{spent}, and a series is one answer, never cut short: {way_out}"),
    )
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// One device's series: its stats machinery, as one page.
    pub(super) async fn device_series(
        &self,
        device: &str,
        series: &SeriesParams,
        consistent: bool,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        let started = Instant::now();
        let time = 2 * self.config.stats_budget.time;
        let read = CellsRead {
            device,
            from_ms: series.range.from_ms,
            to_ms: series.range.to_ms,
            interval_ms: series.interval_ms,
            metric: &series.metric,
            consistent,
            deadline: self.read_deadline(started, deadline),
            // All but the watermark's GetItem: a series past them is refused anyway.
            most_hours: usize::try_from(self.config.budget.queries.saturating_sub(1))
                .unwrap_or(usize::MAX),
        };
        // No page budget of readings: only the request's budgets and the time bound it.
        let budget = StatsBudget {
            readings: u64::MAX / 4,
            time,
        };
        let mut pager = Pager::new(series.interval_ms, budget, started);
        pager.limit_buckets(usize::try_from(MAX_SERIES_POINTS).unwrap_or(usize::MAX));
        let out = self.device_cells(&read, pager, now).await?;
        let (cells, end) = out.pager.finish_cells();
        if out.cut.is_some() || end != PageEnd::Complete {
            let way_out = "read a shorter range, or at an interval_ms of whole minutes (at \
                           least 60000), which reads the sealed hours' cells rather than \
                           their readings";
            return Err(refusal(
                out.cut.unwrap_or(Exhausted::Time),
                &self.config.budget,
                time,
                way_out,
            ));
        }
        let mut answer = SeriesOut::new(series);
        answer.points = points(&cells, series.agg)?;
        Ok((answer.body(&self.config.budget)?, out.stats))
    }

    /// The fleet's series: its sealed buckets, as one page; 403 unless `scope` grants
    /// every device.
    pub(super) async fn fleet_series(
        &self,
        scope: &ReadScope,
        series: &SeriesParams,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        if scope.grants().is_some() {
            return Err(ApiError::forbidden(
                "GET /series counts every device's readings, and the token's device claim \
                 does not grant every device ('*')",
            ));
        }
        let table = self
            .rollups
            .as_ref()
            .ok_or_else(|| not_configured("GET /series"))?;
        let limits = self.config.budget;
        let time = self.config.stats_budget.time;
        let refuse = |budget| refusal(budget, &limits, time, "read a shorter range");
        let spend = Spend::new(table, limits.read(deadline));
        let mut answer = SeriesOut::new(series);
        let until_ms = series.range.to_ms.min(now.as_millis());
        let every_hour = i64::from(u32::MAX);
        let layout = self.stored_layout(now).await?;
        let fresh = fleet_span(
            &spend,
            layout.as_ref(),
            until_ms,
            every_hour,
            Some(&series.metric),
        );
        let mut fleet = match fresh.await? {
            Fetch::Got(fleet) => fleet,
            Fetch::Cut(budget) => return Err(refuse(budget)),
        };
        answer.sealed_from = Some(fleet.sealed.map(|s| instant(s.from_ms)).transpose()?);
        answer.watermark = Some(fleet.sealed.map(|s| instant(s.end_ms)).transpose()?);
        (answer.fresh_from, answer.fresh_to) = fleet.fresh()?;
        let request = FleetRequest {
            range: series.range,
            interval_ms: series.interval_ms,
            metric: Some(&series.metric),
            cursor: None,
        };
        let plan = fleet.answerable().and_then(|span| {
            plan_page(
                &request,
                series.range.from_ms,
                span,
                every_hour,
                MAX_SERIES_POINTS,
            )
        });
        let Some(plan) = plan else {
            return Ok((answer.body(&limits)?, spent(&spend, 0)));
        };
        let hours: Vec<i64> = plan.hours().filter(|&h| fleet.sealed(h)).collect();
        // A Query a sealed hour, each evaluating up to its parts and one more, after the
        // reads of the watermark and the fresh minutes: known before any is sent.
        let n = hours.len() as u64;
        if n + spend.calls() > limits.queries {
            return Err(refuse(Exhausted::Queries));
        }
        if n * (u64::from(PARTS) + 1) + spend.evaluated() > limits.evaluated {
            return Err(refuse(Exhausted::Evaluated));
        }
        let read = self.read_hours(&spend, &hours, Some(&series.metric)).await;
        let mut cells = BTreeMap::new();
        for (hour, fetched) in hours.iter().zip(read) {
            match fetched? {
                Fetch::Got(c) => {
                    cells.insert(*hour, c);
                }
                Fetch::Cut(budget) => return Err(refuse(budget)),
            }
        }
        let cells = fleet.with_fresh(cells);
        let mut bucket = request.bucket_of(plan.start);
        while bucket < plan.end {
            let (c, _) = bucket_cells(series.interval_ms, &plan, &cells, bucket);
            if let Some(cell) = c.metrics.get(&series.metric) {
                answer.points.push((bucket, Value::of(cell, series.agg)?));
            }
            bucket += series.interval_ms;
        }
        let returned = answer.points.len() as u64;
        Ok((answer.body(&limits)?, spent(&spend, returned)))
    }
}

/// The points of `cells` (bucket start to cell), in time order.
fn points(cells: &BTreeMap<i64, Cell>, agg: Agg) -> Result<Vec<(i64, Value)>, ApiError> {
    cells
        .iter()
        .map(|(start, cell)| Ok((*start, Value::of(cell, agg)?)))
        .collect()
}

fn spent(spend: &Spend<'_>, returned: u64) -> ReadStats {
    ReadStats {
        items_read: spend.evaluated(),
        items_returned: returned,
        calls: spend.calls(),
        plan_queries: spend.calls(),
        rounds: 0,
        duplicates: 0,
    }
}
