//! Stats pages: one metric of one device downsampled into buckets, read within a budget.
//!
//! A stats request may span a month of a busy device, millions of readings. One page
//! reads at most [`StatsBudget::readings`] readings and for at most
//! [`StatsBudget::time`], then stops at a bucket boundary: a page holds only complete
//! buckets, and its cursor names where the next page starts (the first bucket it left
//! out). The readings arrive in time order from the merge, so a bucket is complete as
//! soon as a reading of a later bucket arrives.
//!
//! When the budget runs out inside a bucket, [`Pager`] keeps reading to the bucket's
//! end while the readings stay within twice the budget (and the time within twice its
//! time); past that, the bucket is dropped from the page and the next page starts with
//! it. A bucket that alone holds more than twice the budget cannot be answered: the
//! request is refused with `bad_interval`, naming a shorter interval as the way out.
//!
//! The request's own budgets (Queries, items evaluated, wall time: [`crate::budget`])
//! end a page too: at the last bucket boundary the read had settled
//! ([`Pager::stop_at`]), so a sparse or empty range pages on rather than runs out of
//! time. A page also holds at most as many buckets as fit the answer's byte budget.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use store::Decimal;
use store::rollup::{Cell, decimal_text, exact};

use crate::error::{ApiError, codes};
use crate::model::{Exact, StatsBucket, StatsResponse, format_ts};

/// How much one stats page may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsBudget {
    /// Readings aggregated before the page ends at the next bucket boundary.
    pub readings: u64,
    /// Time spent reading before the page ends at the next bucket boundary.
    pub time: Duration,
}

impl Default for StatsBudget {
    /// 100,000 readings (about 28 hours of a device writing every second), and 3 s:
    /// at twice both, still well inside the query function's default 10-s timeout.
    fn default() -> Self {
        Self {
            readings: 100_000,
            time: Duration::from_secs(3),
        }
    }
}

/// Where a page stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageEnd {
    /// Every reading of the range was aggregated: the last page.
    Complete,
    /// The next page starts at this bucket start (epoch ms).
    ResumeAt(i64),
}

/// Aggregates one stats page and decides where it ends.
#[derive(Debug)]
pub struct Pager {
    agg: Downsampler,
    budget: StatsBudget,
    started: Instant,
    /// The bucket the latest reading fell in.
    open: Option<i64>,
    /// Set once the page has stopped.
    end: Option<PageEnd>,
    /// Most buckets in the page.
    max_buckets: usize,
    /// The page was ended by the request's budget, not by its own.
    cut: bool,
}

impl Pager {
    pub fn new(interval_ms: i64, budget: StatsBudget, started: Instant) -> Self {
        Self {
            agg: Downsampler::new(interval_ms),
            budget,
            started,
            open: None,
            end: None,
            max_buckets: usize::MAX,
            cut: false,
        }
    }

    /// Holds the page to at most `n` (at least 1) buckets: the next one starts the
    /// next page.
    pub fn limit_buckets(&mut self, n: usize) {
        self.max_buckets = n.max(1);
    }

    /// The read stopped early (a request budget) with every reading before
    /// `settled_before` taken: the page ends at the last bucket boundary at or before
    /// it. `false` when that boundary is not after `from_ms`, where the page started:
    /// the page would hold nothing and its cursor would not move.
    pub fn stop_at(&mut self, settled_before: i64, from_ms: i64) -> bool {
        if self.end.is_some() {
            return true;
        }
        let resume = self.agg.bucket_of(settled_before);
        if resume <= from_ms {
            return false;
        }
        self.agg.drop_from(resume);
        self.end = Some(PageEnd::ResumeAt(resume));
        self.cut = true;
        true
    }

    /// Takes the next reading in time order (`v`, the metric's value as sent, `None`
    /// when the reading lacks it); `Break` once the page is full.
    pub fn add(&mut self, ts_ms: i64, v: Option<&Decimal>, now: Instant) -> ControlFlow<()> {
        self.admit(ts_ms, now)?;
        self.agg.add(ts_ms, v);
        ControlFlow::Continue(())
    }

    /// Takes the sealed cell of the metric over a unit (a minute or an hour) starting at
    /// `start_ms`, in time order with the readings, and inside one bucket: it merges
    /// into the bucket as its readings would have, one by one. A cell counts nothing
    /// against the page's readings budget (it costs a small read, not its readings).
    pub fn add_cell(&mut self, start_ms: i64, cell: &Cell, now: Instant) -> ControlFlow<()> {
        self.admit(start_ms, now)?;
        self.agg.merge(start_ms, cell);
        ControlFlow::Continue(())
    }

    /// Whether the page has ended: nothing more is taken.
    pub fn ended(&self) -> bool {
        self.end.is_some()
    }

    /// Whether something at `ts_ms` still goes into the page, ending it before the
    /// bucket of `ts_ms` when it is full.
    fn admit(&mut self, ts_ms: i64, now: Instant) -> ControlFlow<()> {
        if self.end.is_some() {
            return ControlFlow::Break(());
        }
        let bucket = self.agg.bucket_of(ts_ms);
        let elapsed = now.saturating_duration_since(self.started);
        let count = self.agg.readings;
        let opens_bucket = self.open.is_some_and(|open| bucket != open);
        let full = self.agg.buckets.len() >= self.max_buckets;
        if opens_bucket && (full || count >= self.budget.readings || elapsed >= self.budget.time) {
            // Every bucket so far is complete: the page ends before this one.
            self.end = Some(PageEnd::ResumeAt(bucket));
            return ControlFlow::Break(());
        }
        if count >= 2 * self.budget.readings || elapsed >= 2 * self.budget.time {
            // Still inside one bucket at twice the budget: leave it to the next page.
            let open = self.open.unwrap_or(bucket);
            self.agg.drop_from(open);
            self.end = Some(PageEnd::ResumeAt(open));
            return ControlFlow::Break(());
        }
        self.open = Some(bucket);
        ControlFlow::Continue(())
    }

    /// Readings aggregated into the page.
    pub fn readings(&self) -> u64 {
        self.agg.readings
    }

    /// The page's buckets and where the next page starts. A page that would hold no
    /// bucket but has more to read is refused: one bucket holds more than two budgets.
    pub fn finish(self, interval: &str) -> Result<(StatsResponse, PageEnd), ApiError> {
        let end = self.end.unwrap_or(PageEnd::Complete);
        if matches!(end, PageEnd::ResumeAt(_)) && self.agg.buckets.is_empty() && !self.cut {
            return Err(ApiError::bad_request(
                codes::BAD_INTERVAL,
                format!(
                    "one bucket of interval {interval} holds more readings than a stats page \
                     may read ({} readings or {} s); choose a shorter interval",
                    2 * self.budget.readings,
                    (2 * self.budget.time).as_secs_f64()
                ),
            ));
        }
        Ok((self.agg.finish()?, end))
    }

    /// The page's cells by bucket start, and where the next page starts.
    pub fn finish_cells(self) -> (BTreeMap<i64, Cell>, PageEnd) {
        (self.agg.buckets, self.end.unwrap_or(PageEnd::Complete))
    }
}

/// An interval in the largest unit that divides it (`90s`, `5m`, `1h`, `2d`), for
/// messages.
pub fn interval_text(ms: i64) -> String {
    const UNITS: [(i64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    UNITS.iter().find(|(unit, _)| ms % unit == 0).map_or_else(
        || format!("{ms}ms"),
        |(unit, name)| format!("{}{name}", ms / unit),
    )
}

/// Per-interval count/min/max/avg of one metric. Buckets are aligned to multiples of
/// the interval since the Unix epoch (like a time-series database's `GROUP BY time`),
/// so the first bucket may start before `from`; empty buckets are left out. Each
/// bucket is a `store::rollup::Cell`, the sealer's own: its sum exact, its mean rounded
/// once (`store::rollup::mean`), so a bucket read raw and one made of sealed cells
/// answer the same numbers.
#[derive(Debug)]
struct Downsampler {
    interval_ms: i64,
    /// Bucket start -> the metric's cell.
    buckets: BTreeMap<i64, Cell>,
    /// Readings taken, with or without the metric.
    readings: u64,
}

impl Downsampler {
    fn new(interval_ms: i64) -> Self {
        Self {
            interval_ms,
            buckets: BTreeMap::new(),
            readings: 0,
        }
    }

    fn bucket_of(&self, ts_ms: i64) -> i64 {
        ts_ms.div_euclid(self.interval_ms) * self.interval_ms
    }

    fn add(&mut self, ts_ms: i64, v: Option<&Decimal>) {
        self.readings += 1;
        let Some(v) = v else {
            return;
        };
        let v = exact(v);
        let bucket = self.bucket_of(ts_ms);
        match self.buckets.get_mut(&bucket) {
            Some(cell) => cell.add(&v),
            None => {
                self.buckets.insert(bucket, Cell::of(v));
            }
        }
    }

    fn merge(&mut self, ts_ms: i64, cell: &Cell) {
        let bucket = self.bucket_of(ts_ms);
        match self.buckets.get_mut(&bucket) {
            Some(mine) => mine.merge(cell),
            None => {
                self.buckets.insert(bucket, cell.clone());
            }
        }
    }

    /// Forgets the buckets from `start` on.
    fn drop_from(&mut self, start: i64) {
        self.buckets.split_off(&start);
    }

    fn finish(self) -> Result<StatsResponse, ApiError> {
        let buckets = self
            .buckets
            .into_iter()
            .map(|(start, cell)| {
                let exact = |v| {
                    Exact::of_text(decimal_text(v))
                        .ok_or_else(|| ApiError::internal("a bucket's number is not a decimal"))
                };
                Ok(StatsBucket {
                    start: format_ts(start)
                        .ok_or_else(|| ApiError::internal("bucket start out of range"))?,
                    count: cell.count,
                    sum: exact(&cell.sum)?,
                    min: exact(&cell.min)?,
                    max: exact(&cell.max)?,
                    avg: cell.avg(),
                })
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        Ok(StatsResponse {
            buckets,
            next_cursor: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;

    fn one() -> Decimal {
        Decimal::parse("1").unwrap()
    }

    fn budget(readings: u64) -> StatsBudget {
        StatsBudget {
            readings,
            time: Duration::from_secs(3600),
        }
    }

    /// Feeds `per_bucket` readings into each of `buckets` hour buckets, one value each.
    fn feed(pager: &mut Pager, buckets: i64, per_bucket: i64, at: Instant) -> ControlFlow<()> {
        for b in 0..buckets {
            for i in 0..per_bucket {
                pager.add(b * HOUR + i, Some(&one()), at)?;
            }
        }
        ControlFlow::Continue(())
    }

    #[test]
    fn a_page_ends_at_the_first_bucket_boundary_past_the_budget() {
        let t = Instant::now();
        let mut pager = Pager::new(HOUR, budget(25), t);
        assert!(feed(&mut pager, 10, 10, t).is_break());
        let (page, end) = pager.finish("1h").unwrap();
        // 25 readings reached inside the third bucket, which is finished first.
        assert_eq!(page.buckets.len(), 3);
        assert!(page.buckets.iter().all(|b| b.count == 10));
        assert_eq!(end, PageEnd::ResumeAt(3 * HOUR));
    }

    #[test]
    fn a_range_within_the_budget_is_one_complete_page() {
        let t = Instant::now();
        let mut pager = Pager::new(HOUR, budget(1000), t);
        assert!(feed(&mut pager, 10, 10, t).is_continue());
        let (page, end) = pager.finish("1h").unwrap();
        assert_eq!(page.buckets.len(), 10);
        assert_eq!(end, PageEnd::Complete);
    }

    #[test]
    fn a_bucket_past_twice_the_budget_moves_to_the_next_page() {
        let t = Instant::now();
        let mut pager = Pager::new(HOUR, budget(10), t);
        // 5 in bucket 0, then bucket 1 runs past 20 readings.
        for i in 0..5 {
            assert!(pager.add(i, Some(&one()), t).is_continue());
        }
        let mut broke_at = None;
        for i in 0..100 {
            if pager.add(HOUR + i, Some(&one()), t).is_break() {
                broke_at = Some(i);
                break;
            }
        }
        assert_eq!(broke_at, Some(15), "20 readings in all, then it stops");
        let (page, end) = pager.finish("1h").unwrap();
        assert_eq!(page.buckets.len(), 1, "the partial bucket is left out");
        assert_eq!(page.buckets[0].count, 5);
        assert_eq!(end, PageEnd::ResumeAt(HOUR));
    }

    #[test]
    fn a_single_bucket_past_twice_the_budget_is_refused_naming_the_interval() {
        let t = Instant::now();
        let mut pager = Pager::new(HOUR, budget(10), t);
        assert!(feed(&mut pager, 1, 100, t).is_break());
        let err = pager.finish("1h").unwrap_err();
        assert_eq!(err.code, codes::BAD_INTERVAL);
        assert!(err.message.contains("interval 1h"), "{}", err.message);
    }

    #[test]
    fn the_time_budget_ends_a_page_at_a_bucket_boundary() {
        let t = Instant::now();
        let mut pager = Pager::new(
            HOUR,
            StatsBudget {
                readings: u64::MAX / 4,
                time: Duration::from_secs(1),
            },
            t,
        );
        let n = |t: &str| Decimal::parse(t).unwrap();
        assert!(pager.add(0, Some(&n("1")), t).is_continue());
        let late = t + Duration::from_millis(1500);
        assert!(
            pager.add(1, Some(&n("2")), late).is_continue(),
            "same bucket"
        );
        assert!(pager.add(HOUR, Some(&n("3")), late).is_break());
        let (page, end) = pager.finish("1h").unwrap();
        assert_eq!(page.buckets.len(), 1);
        assert_eq!(page.buckets[0].count, 2);
        assert_eq!(end, PageEnd::ResumeAt(HOUR));
    }

    #[test]
    fn a_bucket_sums_exactly_and_rounds_its_mean_once() {
        let t = Instant::now();
        let mut pager = Pager::new(HOUR, budget(1000), t);
        // Summed through doubles, 0.1 + 0.2 + 0.3 is 0.6000000000000001.
        for (i, v) in ["0.1", "0.2", "0.3"].iter().enumerate() {
            let v = Decimal::parse(v).unwrap();
            assert!(pager.add(i as i64, Some(&v), t).is_continue());
        }
        let (page, _) = pager.finish("1h").unwrap();
        assert_eq!(page.buckets[0].avg, 0.2);
        let b = &page.buckets[0];
        assert_eq!((b.min.as_str(), b.max.as_str()), ("0.1", "0.3"));
        assert_eq!(b.sum.as_str(), "0.6");
    }

    #[test]
    fn intervals_are_named_in_their_largest_unit() {
        assert_eq!(interval_text(90_000), "90s");
        assert_eq!(interval_text(300_000), "5m");
        assert_eq!(interval_text(3_600_000), "1h");
        assert_eq!(interval_text(2 * 86_400_000), "2d");
    }

    #[test]
    fn readings_without_the_metric_count_against_the_budget_but_make_no_bucket() {
        let t = Instant::now();
        let mut pager = Pager::new(HOUR, budget(1000), t);
        assert!(pager.add(0, None, t).is_continue());
        assert!(pager.add(1, None, t).is_continue());
        assert_eq!(pager.readings(), 2);
        let (page, end) = pager.finish("1h").unwrap();
        assert!(page.buckets.is_empty());
        assert_eq!(end, PageEnd::Complete);
    }
}
