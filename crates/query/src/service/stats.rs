//! The stats route, `GET /devices/{device_id}/stats`: one metric of one device in
//! buckets of `interval`, a page of complete buckets at a time ([`crate::stats`] says
//! where a page ends), each reading counted once.
//!
//! Where the service reads the sealer's items (`ROLLUP_TABLE`) and the interval is a
//! whole number of minutes, the hours the sealer has sealed are answered from its
//! cells, and the rest of the range from the readings (`super::sealed` says how the
//! range splits): one GetItem of the watermark, then the readings before the sealed
//! cells, the cells, and the readings after them, in time order into one
//! [`Pager`], all within the request's budgets. A bucket that straddles the
//! watermark merges the two. The device's series (`super::series`) reads the same
//! way, as one answer.

use std::ops::ControlFlow;
use std::time::Instant;

use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::read_plan::plan_entity;
use sharding::time::Timestamp;
use store::directory::{DeviceLayout, ShardReader};
use store::read::ReadingSource;
use store::rollup::MINUTE_MS;

use super::answer::{PAGE_OVERHEAD_BYTES, exec_error, json_body};
use super::plan::{plan_error, specs, to_time_range};
use super::rollups::{Fetch, Marks, Spend};
use super::sealed::{read_sealed, split};
use super::slabs::SlabProgress;
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice, RequestBudget};
use crate::cursor::{Binding, decode_cursor, encode_cursor};
use crate::error::ApiError;
use crate::exec::{Exhausted, ReadBudget, ReadCost, ReadOptions, merge_each};
use crate::model::ReadingKey;
use crate::params::Range;
use crate::stats::{PageEnd, Pager, interval_text};
use store::rollup::watermark::Watermark;

/// The most bytes one stats bucket takes as JSON, with the comma after it: a
/// 24-character start, a 20-digit count, a double of at most 24 characters (`avg`), a
/// `min` and a `max` as sent (`store::rollup::decimal_text` of at most 38 digits: plain
/// down to 30 trailing zeros or up to 60 decimals, at most 69 characters), a `sum` (of
/// at most 2^64 values below 10^126 in units of 10^-130: at most 276 digits, written
/// with an exponent past 60 decimals, at most 284 characters), and the field names.
/// `the_widest_bucket_fits_its_bound` holds it.
const STATS_BUCKET_MAX_BYTES: usize = 560;

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
    fn binding(&self) -> Binding {
        Binding {
            route: "stats",
            device: Some(self.device.to_owned()),
            from_ms: self.range.from_ms,
            to_ms: self.range.to_ms,
            descending: false,
            limit: 0,
            detail: format!("interval={} metric={}", self.interval_ms, self.metric),
            scope: None,
        }
    }
}

/// What one read of a device's cells covers: `[from_ms, to_ms)` (a page's part of the
/// range) in buckets of `interval_ms`.
#[derive(Debug, Clone, Copy)]
pub(super) struct CellsRead<'a> {
    pub(super) device: &'a str,
    pub(super) from_ms: i64,
    pub(super) to_ms: i64,
    pub(super) interval_ms: i64,
    pub(super) metric: &'a str,
    /// Strongly consistent reads of the readings (the sealed items always are).
    pub(super) consistent: bool,
    /// No read is sent after it.
    pub(super) deadline: Instant,
    /// Most device-hours (a GetItem each) the read takes; the rest is cut.
    pub(super) most_hours: usize,
}

/// Where a read of a device's cells stands: its pager (every bucket it took), the
/// request budget that ended it early (`None`: it read the range, or the pager's own
/// budget ended the page), whether that left the page without a bucket boundary past
/// its start (`stalled`: nothing to answer, no cursor that would move), and its cost.
#[derive(Debug)]
pub(super) struct CellsOutcome {
    pub(super) pager: Pager,
    pub(super) cut: Option<Exhausted>,
    pub(super) stalled: bool,
    pub(super) stats: ReadStats,
}

/// Where the read's parts stop: the budget that cut one, and whether the pager could
/// end its page at a bucket boundary there.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    cut: Option<Exhausted>,
    stalled: bool,
}

impl Progress {
    fn stop(&mut self, budget: Exhausted, pager: &mut Pager, at: i64, from_ms: i64) {
        self.cut = Some(budget);
        self.stalled = !pager.stop_at(at, from_ms);
    }

    fn goes_on(&self, pager: &Pager) -> bool {
        self.cut.is_none() && !pager.ended()
    }
}

/// The most device-hours one stats page reads: half the Query budget after the
/// watermark's GetItem, the other half left to the readings.
fn page_hours(budget: &RequestBudget) -> usize {
    usize::try_from(budget.queries.saturating_sub(1) / 2)
        .unwrap_or(usize::MAX)
        .max(1)
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
        let binding = request.binding();
        let read = CellsRead {
            device: request.device,
            from_ms: self.page_start(request, &binding, now)?,
            to_ms: request.range.to_ms,
            interval_ms: request.interval_ms,
            metric: request.metric,
            consistent: request.consistent,
            deadline: self.read_deadline(started, deadline),
            most_hours: page_hours(&self.config.budget),
        };
        let mut pager = Pager::new(request.interval_ms, self.config.stats_budget, started);
        pager.limit_buckets(self.max_buckets());
        let out = self.device_cells(&read, pager, now).await?;
        if out.stalled {
            let budget = out.cut.unwrap_or(Exhausted::Time);
            return Err(budget::refusal(
                budget,
                &self.config.budget,
                Advice::NarrowRange,
            ));
        }
        let (mut page, end) = out.pager.finish(&interval_text(request.interval_ms))?;
        if let PageEnd::ResumeAt(next) = end {
            let position = ReadingKey {
                ts_ms: next,
                device_id: request.device.to_owned(),
                event_id: String::new(),
            };
            let keys = self.config.cursor_keys.get();
            page.next_cursor = Some(encode_cursor(&position, &binding, &keys, now));
        }
        let body = json_body(&page)?;
        Ok((body, out.stats))
    }

    /// Reads `read`'s cells into `pager`, in time order: the readings before the
    /// sealed cells, the cells, the readings after them (all readings where nothing
    /// of the range is sealed, the interval is not a whole number of minutes, or the
    /// service has no rollups table). Each part is read only while the page goes on,
    /// with what the parts before it left of the request's budgets.
    pub(super) async fn device_cells(
        &self,
        read: &CellsRead<'_>,
        mut pager: Pager,
        now: Timestamp,
    ) -> Result<CellsOutcome, ApiError> {
        let mut progress = Progress::default();
        let Some(DeviceLayout { table, fanout }) = self.device_layout(read.device, now).await?
        else {
            // Nothing was ever written.
            return Ok(CellsOutcome {
                pager,
                cut: None,
                stalled: false,
                stats: ReadStats::default(),
            });
        };
        let budget = self.config.budget.read(Some(read.deadline));
        let spend = self
            .rollups
            .as_ref()
            .filter(|_| read.interval_ms % MINUTE_MS == 0)
            .map(|t| Spend::consistent(t, budget));
        let span = match &spend {
            None => None,
            Some(spend) => match spend.sealed_span().await? {
                Fetch::Got(span) => span,
                Fetch::Cut(budget) => {
                    progress.stop(budget, &mut pager, read.from_ms, read.from_ms);
                    None
                }
            },
        };
        let span = unmarked(spend.as_ref(), span, read).await?;
        let parts = split(read.from_ms, read.to_ms, read.interval_ms, span);
        let mut ledger = Ledger {
            spend: spend.as_ref(),
            budget,
            cost: ReadCost::default(),
            plan_queries: 0,
        };
        let readings = [parts.head, parts.tail].into_iter().flatten();
        let slabs = match readings.reduce(|a, b| (a.0.min(b.0), a.1.max(b.1))) {
            Some(hull) if progress.goes_on(&pager) => {
                self.raw_slabs(&table, hull, &mut ledger).await?
            }
            _ => SlabProgress::NoSlabs,
        };
        let raw = RawRead {
            table: &table,
            fanout: &fanout,
            read,
            slabs,
            now,
        };
        let mut sealed_readings = 0;
        if let Some(head) = parts.head
            && progress.goes_on(&pager)
        {
            self.raw_cells(&raw, head, &mut ledger, &mut pager, &mut progress)
                .await?;
        }
        if let Some(spend) = &spend
            && parts.sealed.is_some()
            && progress.goes_on(&pager)
        {
            let concurrency = self.config.concurrency;
            let sealed = read_sealed(spend, read, &parts, concurrency).await?;
            sealed_readings = sealed.readings;
            for (start, cell) in &sealed.cells {
                if pager.add_cell(*start, cell, Instant::now()).is_break() {
                    break;
                }
            }
            if let Some((at, budget)) = sealed.cut
                && !pager.ended()
            {
                progress.stop(budget, &mut pager, at, read.from_ms);
            }
        }
        if let Some(tail) = parts.tail
            && progress.goes_on(&pager)
        {
            self.raw_cells(&raw, tail, &mut ledger, &mut pager, &mut progress)
                .await?;
        }
        let cost = ledger.cost;
        let sealed_calls = spend.as_ref().map_or(0, |s| s.calls() - cost.pages);
        let stats = ReadStats {
            items_read: spend.as_ref().map_or(cost.items_read, Spend::evaluated),
            items_returned: pager.readings() + sealed_readings,
            calls: cost.pages + sealed_calls,
            plan_queries: ledger.plan_queries + sealed_calls,
            // The watermark, then the sealed reads, sent at once.
            rounds: cost.rounds + sealed_calls.min(2),
            duplicates: cost.duplicates,
        };
        Ok(CellsOutcome {
            pager,
            cut: progress.cut,
            stalled: progress.stalled,
            stats,
        })
    }

    /// What the reads of the readings in `[a, b)` read slab-held readings by: one
    /// progress for both parts, charged to `ledger`.
    async fn raw_slabs(
        &self,
        table: &TableHistory,
        (a, b): (i64, i64),
        ledger: &mut Ledger<'_, '_>,
    ) -> Result<SlabProgress, ApiError> {
        let range = to_time_range(Range {
            from_ms: a,
            to_ms: b,
        })?;
        let mut spent = ReadCost::default();
        let slabs = self
            .slab_progress(table, range, ledger.remaining(), &mut spent)
            .await?;
        ledger.charge(spent, 0);
        Ok(slabs)
    }

    /// Reads the readings of `[a, b)` into `pager` within what is left of the budgets,
    /// and charges what it cost to `ledger`. A budget that stops it ends the page at
    /// the last bucket boundary the read had settled (`progress`).
    async fn raw_cells(
        &self,
        raw: &RawRead<'_>,
        (a, b): (i64, i64),
        ledger: &mut Ledger<'_, '_>,
        pager: &mut Pager,
        progress: &mut Progress,
    ) -> Result<(), ApiError> {
        let read = raw.read;
        let range = to_time_range(Range {
            from_ms: a,
            to_ms: b,
        })?;
        let plan = plan_entity(read.device, range, raw.table, raw.fanout).map_err(plan_error)?;
        let mut specs = specs(&plan);
        specs.extend(
            self.slab_streams(read.device, range, raw.table, raw.slabs, raw.now)
                .await?,
        );
        let planned = specs.len() as u64;
        let opts = ReadOptions {
            descending: false,
            consistent: read.consistent,
            concurrency: self.config.concurrency,
            max_buffered: self.config.max_buffered,
            budget: ledger.remaining(),
        };
        // In merge order, so a reading stored under two keys is counted once, and the
        // buckets close in time order.
        let outcome = merge_each(
            &self.source,
            specs,
            opts,
            self.config.stats_window,
            |item| {
                if item.device_id != read.device || !(a..b).contains(&item.ts_ms) {
                    return ControlFlow::Continue(());
                }
                pager.add(item.ts_ms, item.metrics.get(read.metric), Instant::now())
            },
        )
        .await
        .map_err(exec_error)?;
        if let Some(stopped) = outcome.stopped {
            progress.stop(stopped.budget, pager, stopped.settled_before, read.from_ms);
        }
        ledger.charge(outcome.cost, planned);
        Ok(())
    }

    /// Where the page starts: a page after the first starts at the bucket the previous
    /// one left out, which its cursor names.
    fn page_start(
        &self,
        request: &StatsRequest<'_>,
        binding: &Binding,
        now: Timestamp,
    ) -> Result<i64, ApiError> {
        match request.cursor {
            Some(raw) => Ok(
                decode_cursor(raw, binding, &self.config.cursor_keys.get(), now)
                    .map_err(|e| ApiError::bad_cursor(e.to_string()))?
                    .ts_ms,
            ),
            None => Ok(request.range.from_ms),
        }
    }

    /// When a read of cells stops: the earlier of the request's deadline and the
    /// page's own time budget (twice [`crate::stats::StatsBudget::time`]), so a sparse
    /// range stops there as well.
    pub(super) fn read_deadline(&self, started: Instant, deadline: Option<Instant>) -> Instant {
        let page_deadline = started + 2 * self.config.stats_budget.time;
        deadline.map_or(page_deadline, |d| d.min(page_deadline))
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

/// What a read of one device's readings needs besides its range.
struct RawRead<'a> {
    table: &'a TableHistory,
    fanout: &'a FanoutHistory,
    read: &'a CellsRead<'a>,
    /// What its reads of slab-held readings are planned by.
    slabs: SlabProgress,
    /// The request's clock, which dates the directory's cached slab group fan-outs.
    now: Timestamp,
}

/// What a request's reads of the readings have spent, beside its sealed reads (which
/// `spend` counts, and is charged every cost too).
struct Ledger<'s, 'a> {
    spend: Option<&'s Spend<'a>>,
    budget: ReadBudget,
    cost: ReadCost,
    plan_queries: u64,
}

impl Ledger<'_, '_> {
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

    fn charge(&mut self, cost: ReadCost, planned: u64) {
        if let Some(spend) = self.spend {
            spend.charge(cost);
        }
        self.cost.items_read += cost.items_read;
        self.cost.pages += cost.pages;
        self.cost.rounds += cost.rounds;
        self.cost.duplicates += cost.duplicates;
        self.plan_queries += planned;
    }
}

/// The sealed span a device's cells are read over, unless a sealed hour of the range
/// holds a late mark of the device (a reading written after the seal, or a device-hour
/// the sealer isolated): its cells are not what its readings say until the next run,
/// so the range is answered from the readings.
async fn unmarked(
    spend: Option<&Spend<'_>>,
    span: Option<Watermark>,
    read: &CellsRead<'_>,
) -> Result<Option<Watermark>, ApiError> {
    let (Some(spend), Some(s)) = (spend, span) else {
        return Ok(span);
    };
    if read.from_ms >= s.end_ms || s.from_ms >= read.to_ms {
        return Ok(span);
    }
    Ok(
        match spend
            .marked(read.device, s, read.from_ms, read.to_ms)
            .await?
        {
            Marks::Marked | Marks::Unknown => None,
            Marks::Clear => span,
        },
    )
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use bigdecimal::BigDecimal;
    use store::rollup::decimal_text;

    use super::*;
    use crate::model::{Exact, StatsBucket};

    #[test]
    fn the_widest_bucket_fits_its_bound() {
        let d = |t: &str| BigDecimal::from_str(t).unwrap();
        let nines = "9".repeat(38);
        // The widest stored values: 38 digits and 30 zeros, plain; 38 digits at 60
        // decimals, plain; the largest and the smallest exponent.
        let values = [
            d(&format!("-{nines}e30")),
            d(&format!("-{nines}e-60")),
            d(&format!("-{nines}e88")),
            d(&format!("-{nines}e-167")),
        ];
        let widest_value = values.iter().map(|v| decimal_text(v).len()).max().unwrap();
        assert_eq!(widest_value, 69);
        // The widest sum: 2^64 - 1 of the largest, and the smallest value.
        let sum = d(&format!("-{nines}e88")) * BigDecimal::from(u64::MAX) + d("-1e-130");
        let sum_text = decimal_text(&sum);
        assert!(sum_text.len() <= 284, "{} {sum_text}", sum_text.len());
        let exact = |v: &BigDecimal| Exact::of_text(decimal_text(v)).unwrap();
        let bucket = StatsBucket {
            start: "9999-12-31T23:59:59.999Z".to_owned(),
            count: u64::MAX,
            sum: exact(&sum),
            min: exact(&values[0]),
            max: exact(&values[0]),
            avg: -f64::MAX,
        };
        let len = budget::json_len(&bucket) + 1;
        assert!(len <= STATS_BUCKET_MAX_BYTES, "{len}");
    }
}
