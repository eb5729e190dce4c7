//! The rollups table (`ROLLUP_TABLE`, `store::rollup`) as the routes over the sealer's
//! derived items read it: its reads behind one object, so a service without the table
//! keeps its two type parameters ([`crate::QueryService::with_rollups`] adds it), the
//! sealer's watermark, and the request's budgets counted over these reads as they are
//! sent, concurrent ones included (and over a request's reads of the readings, which
//! are charged to the same ledger).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::future::BoxFuture;
use store::error::StoreError;
use store::rollup::compaction::{Compacted, read_compacted};
use store::rollup::watermark::Watermark;
use store::rollup::{RollupItem, RollupPage, RollupQuery, RollupTable, hour_of, keys, part_of};

use super::answer::store_error;
use crate::error::ApiError;
use crate::exec::{Exhausted, ReadBudget, ReadCost, within};
use crate::model::format_ts;
use crate::params::MAX_TS_MS;

/// The reads of [`RollupTable`] the query makes, as an object.
trait RollupReader: Send + Sync {
    fn get<'a>(
        &'a self,
        pk: &'a str,
        sk: &'a str,
        consistent: bool,
    ) -> BoxFuture<'a, Result<Option<RollupItem>, StoreError>>;

    fn query<'a>(&'a self, q: &'a RollupQuery) -> BoxFuture<'a, Result<RollupPage, StoreError>>;

    fn compacted(&self) -> BoxFuture<'_, Result<Option<Compacted>, StoreError>>;
}

impl<T: RollupTable> RollupReader for T {
    fn get<'a>(
        &'a self,
        pk: &'a str,
        sk: &'a str,
        consistent: bool,
    ) -> BoxFuture<'a, Result<Option<RollupItem>, StoreError>> {
        Box::pin(RollupTable::get(self, pk, sk, consistent))
    }

    fn query<'a>(&'a self, q: &'a RollupQuery) -> BoxFuture<'a, Result<RollupPage, StoreError>> {
        Box::pin(RollupTable::query(self, q))
    }

    fn compacted(&self) -> BoxFuture<'_, Result<Option<Compacted>, StoreError>> {
        Box::pin(read_compacted(self))
    }
}

/// The rollups table a service reads. Cheap to clone.
#[derive(Clone)]
pub(super) struct Rollups(Arc<dyn RollupReader>);

impl fmt::Debug for Rollups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Rollups")
    }
}

impl Rollups {
    pub(super) fn new(table: impl RollupTable + 'static) -> Self {
        Self(Arc::new(table))
    }

    /// The compaction progress of slabs into runs (one strongly consistent GetItem);
    /// `None` before the first window is compacted.
    pub(super) async fn compacted(&self) -> Result<Option<Compacted>, StoreError> {
        self.0.compacted().await
    }
}

/// The routes' answer on a deployment without the table: 501 naming the variable.
pub(super) fn not_configured(route: &str) -> ApiError {
    ApiError::not_implemented(format!(
        "{route} reads the sealer's derived items, and this deployment has no rollups \
         table (ROLLUP_TABLE is not set)"
    ))
}

/// A read of the rollups table, or the budget that stopped it before it was sent.
#[derive(Debug)]
pub(super) enum Fetch<T> {
    Got(T),
    Cut(Exhausted),
}

/// The request's budgets over its reads of the rollups table: each read takes one call
/// and reserves the items it may evaluate before it is sent (its `Limit`), and gives
/// back what it did not evaluate once answered, so reads sent at once never exceed the
/// budgets together.
pub(super) struct Spend<'a> {
    table: &'a Rollups,
    budget: ReadBudget,
    /// Whether its reads are strongly consistent.
    consistent: bool,
    calls: AtomicU64,
    evaluated: AtomicU64,
}

impl<'a> Spend<'a> {
    /// Eventually consistent reads, as the routes over the sealer's items alone make
    /// them: those items change once an hour at most.
    pub(super) fn new(table: &'a Rollups, budget: ReadBudget) -> Self {
        Self {
            table,
            budget,
            consistent: false,
            calls: AtomicU64::new(0),
            evaluated: AtomicU64::new(0),
        }
    }

    /// Strongly consistent reads: a reader that mixes sealed items with readings reads
    /// every item the sealer wrote before its watermark passed the item's hour.
    pub(super) fn consistent(table: &'a Rollups, budget: ReadBudget) -> Self {
        Self {
            consistent: true,
            ..Self::new(table, budget)
        }
    }

    /// Charges what a read of the readings cost, so the reads after it have only what
    /// is left.
    pub(super) fn charge(&self, cost: ReadCost) {
        self.calls.fetch_add(cost.pages, Ordering::SeqCst);
        self.evaluated.fetch_add(cost.items_read, Ordering::SeqCst);
    }

    /// What is left of the budgets, for a read of the readings.
    pub(super) fn remaining(&self) -> ReadBudget {
        ReadBudget {
            queries: self.budget.queries.saturating_sub(self.calls()),
            evaluated: self.budget.evaluated.saturating_sub(self.evaluated()),
            deadline: self.budget.deadline,
        }
    }

    /// Calls sent so far.
    pub(super) fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Items evaluated so far (reserved, for reads still out).
    pub(super) fn evaluated(&self) -> u64 {
        self.evaluated.load(Ordering::SeqCst)
    }

    /// One call, and up to `want` items to evaluate (at least one): how many.
    fn reserve(&self, want: u64) -> Result<u64, Exhausted> {
        if self.budget.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Exhausted::Time);
        }
        let most = self.budget.evaluated;
        let mut granted = 0;
        self.evaluated
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spent| {
                granted = want.max(1).min(most.saturating_sub(spent));
                (granted > 0).then_some(spent + granted)
            })
            .map_err(|_| Exhausted::Evaluated)?;
        let calls = self
            .calls
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                (c < self.budget.queries).then_some(c + 1)
            });
        if calls.is_err() {
            self.evaluated.fetch_sub(granted, Ordering::SeqCst);
            return Err(Exhausted::Queries);
        }
        Ok(granted)
    }

    /// Gives back what a read reserved and did not evaluate.
    fn settle(&self, reserved: u64, used: u64) {
        self.evaluated
            .fetch_sub(reserved.saturating_sub(used), Ordering::SeqCst);
    }

    /// One page of `q`, at most `want` items (its `Limit`, cut to the budget).
    pub(super) async fn query(
        &self,
        q: &RollupQuery,
        want: u64,
    ) -> Result<Fetch<RollupPage>, ApiError> {
        let granted = match self.reserve(want) {
            Ok(granted) => granted,
            Err(budget) => return Ok(Fetch::Cut(budget)),
        };
        let mut q = q.clone();
        q.limit = Some(u32::try_from(granted).unwrap_or(u32::MAX));
        q.consistent |= self.consistent;
        // A read the deadline overtakes keeps its reservation: it may have been served.
        let Some(page) = within(self.budget.deadline, self.table.0.query(&q)).await else {
            return Ok(Fetch::Cut(Exhausted::Time));
        };
        let page = page.map_err(store_error)?;
        self.settle(granted, page.evaluated);
        Ok(Fetch::Got(page))
    }

    /// One item, by its key.
    pub(super) async fn get(
        &self,
        pk: &str,
        sk: &str,
    ) -> Result<Fetch<Option<RollupItem>>, ApiError> {
        if let Err(budget) = self.reserve(1) {
            return Ok(Fetch::Cut(budget));
        }
        let read = self.table.0.get(pk, sk, self.consistent);
        let Some(item) = within(self.budget.deadline, read).await else {
            return Ok(Fetch::Cut(Exhausted::Time));
        };
        let item = item.map_err(store_error)?;
        self.settle(1, u64::from(item.is_some()));
        Ok(Fetch::Got(item))
    }

    /// The sealer's watermark: the end (epoch ms, an hour boundary) of the hours it has
    /// sealed, every hour before it sealed; `None` before the first.
    pub(super) async fn watermark(&self) -> Result<Fetch<Option<i64>>, ApiError> {
        let key = keys::watermark();
        Ok(match self.get(&key.pk, &key.sk).await? {
            Fetch::Got(item) => Fetch::Got(
                item.map(|i| i64::try_from(i.version).unwrap_or(MAX_TS_MS).min(MAX_TS_MS)),
            ),
            Fetch::Cut(budget) => Fetch::Cut(budget),
        })
    }
}

impl Spend<'_> {
    /// The hours sealed, from the watermark, cut to the hours a reader trusts
    /// (`Watermark::trusted`); `None` before the first, or when the watermark names no
    /// first hour (every watermark the sealer writes does), or no hour.
    pub(super) async fn sealed_span(&self) -> Result<Fetch<Option<Watermark>>, ApiError> {
        let key = keys::watermark();
        Ok(match self.get(&key.pk, &key.sk).await? {
            Fetch::Got(item) => Fetch::Got(
                item.and_then(|i| Watermark::of(&i).ok())
                    .and_then(Watermark::trusted),
            ),
            Fetch::Cut(budget) => Fetch::Cut(budget),
        })
    }
}

/// What a check of a device's late marks over a range's sealed hours found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marks {
    /// No mark of the device: its cells hold what its readings say.
    Clear,
    /// A mark of the device.
    Marked,
    /// The check could not tell: the part holds more marks than one check reads, or a
    /// budget cut the check short.
    Unknown,
}

/// Most late marks of a device's part one check reads: more than this many in the
/// range's hours and the range is answered from its readings.
const MOST_MARKS: u64 = 200;

impl Spend<'_> {
    /// Whether `device` has a late mark in a sealed hour of `[from_ms, to_ms)`: a
    /// device-hour written after its seal, or isolated by the sealer, whose cells do not
    /// hold what its readings say until the next run. One Query of the device's part of
    /// the marks (`late#{part}`), over the range's hours. [`Marks::Unknown`] when the
    /// part holds more marks than one check reads, or a budget cut the check short: the
    /// readings then answer, as for a mark, never a stale cell.
    pub(super) async fn marked(
        &self,
        device: &str,
        span: Watermark,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Marks, ApiError> {
        let first = hour_of(from_ms.max(span.from_ms));
        let last = hour_of((to_ms.min(span.end_ms) - 1).max(first));
        let mut q = RollupQuery::partition(keys::late_part(part_of(device)), false);
        q.sk_between = Some(keys::late_marks_between(first, last));
        let page = match self.query(&q, MOST_MARKS).await? {
            Fetch::Got(page) => page,
            Fetch::Cut(_) => return Ok(Marks::Unknown),
        };
        let names = |mark: &RollupItem| {
            keys::parse_late_mark(&mark.sk).is_some_and(|(_, marked)| marked == device)
        };
        Ok(if page.items.iter().any(names) {
            Marks::Marked
        } else if page.last_sk.is_some() {
            Marks::Unknown
        } else {
            Marks::Clear
        })
    }
}

/// An instant of the answer (a watermark, a time seen), RFC 3339.
pub(super) fn instant(ms: i64) -> Result<String, ApiError> {
    format_ts(ms).ok_or_else(|| ApiError::internal(format!("stored time {ms} ms out of range")))
}
