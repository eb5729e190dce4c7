//! Read plans: the exact set of key-range queries that can hold data for a time range.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::block::{BLOCK_LANE, MAX_WINDOW_MS};
use crate::epoch::{FanoutHistory, TableHistory};
use crate::hash::shard_index;
use crate::key::{KeyError, bucket_pk, entity_pk, fanout_count, validate_id};
use crate::layout::Strategy;
use crate::time::{TimeRange, Timestamp};

/// Items DynamoDB may evaluate for one read request by default, the query function's
/// `QUERY_MAX_EVALUATED`: the readings a stats page may aggregate inside one bucket,
/// plus a quarter.
pub const DEFAULT_MAX_EVALUATED: u64 = 250_000;
/// Most queries one plan may hold; a larger plan means the range is too wide for the
/// bucket size and should be split by the caller.
pub const MAX_PLAN_QUERIES: usize = 100_000;

/// Upper bound appended after the last `#` of a sort-key range: `~` sorts above every
/// id character (`[A-Za-z0-9._:-]`).
pub const SK_UPPER: char = '~';

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The entity or a hot entity id is not a valid id.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A cross-entity read over a span whose strategy keeps entities in their own keys
    /// (it would need a table scan).
    #[error("reading all entities is not supported by the {strategy} layout in force over {span}")]
    Unsupported {
        /// The strategy in force.
        strategy: String,
        /// The part of the range it governs.
        span: TimeRange,
    },
    /// The plan would exceed [`MAX_PLAN_QUERIES`].
    #[error("the plan needs more than {limit} queries; read a shorter range")]
    TooLarge {
        /// [`MAX_PLAN_QUERIES`].
        limit: usize,
    },
}

impl PlanError {
    /// Whether the request itself is at fault (every variant: bad id, unsupported read or
    /// too wide a range).
    #[must_use]
    pub const fn is_invalid_input(&self) -> bool {
        true
    }
}

/// One DynamoDB `Query`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyQuery {
    /// Partition key value.
    pub pk: String,
    /// Inclusive sort-key bounds for `SK BETWEEN :lo AND :hi`; `None` reads the whole PK.
    pub sk_between: Option<(String, String)>,
    /// Readings outside this range must be dropped by the reader (cross-entity plans,
    /// where the sort key starts with the entity and cannot express a time range).
    pub time_filter: Option<TimeRange>,
    /// Whether the query returns items in time order (sort key = time first, or
    /// entity-prefixed for a single entity). If false, the reader must buffer and sort.
    pub time_ordered: bool,
    /// The part of the requested range this query answers for: a reader keeps the
    /// readings of its items that lie in it.
    pub covers: TimeRange,
    /// Where the layout packs readings into blocks (`crate::block`): an item can hold
    /// readings up to this many milliseconds after its own sort time (a block's first
    /// member's), and comes in the order of its sort time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_window_ms: Option<u32>,
    /// Where it differs from `covers`: the sort times of the items the query reads (by
    /// its sort-key bounds, or, without them, the time filter a reader sends). A block
    /// layout's query reads back the block window before `covers`, since a block that
    /// starts earlier can hold readings inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts: Option<TimeRange>,
}

impl KeyQuery {
    /// The sort times of the items the query reads ([`KeyQuery::starts`], else what
    /// it answers for).
    #[must_use]
    pub fn starts(&self) -> TimeRange {
        self.starts
            .unwrap_or_else(|| self.time_filter.unwrap_or(self.covers))
    }

    /// `[from, to)` ms: the readings the query answers for (its time filter, else what
    /// it covers); a reader drops the others.
    #[must_use]
    pub fn span_ms(&self) -> (i64, i64) {
        self.time_filter.unwrap_or(self.covers).as_millis()
    }

    /// `[from, to)` ms: [`KeyQuery::starts`], the sort times of the items the query
    /// reads.
    #[must_use]
    pub fn starts_ms(&self) -> (i64, i64) {
        self.starts().as_millis()
    }
}

/// Every query needed for one read; together they hold exactly the keys that can hold data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadPlan {
    /// The queries, in time order of their first piece.
    pub queries: Vec<KeyQuery>,
}

impl ReadPlan {
    /// Number of queries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.queries.len()
    }

    /// Whether the plan reads nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }
}

/// Sort-key prefix shape of a strategy.
#[derive(Clone, Copy)]
enum SkShape<'a> {
    /// `{ts}#{event_id}`
    Plain,
    /// `{entity}#{ts}#{event_id}`
    Entity(&'a str),
}

fn sk_bounds(shape: SkShape<'_>, covers: TimeRange) -> (String, String) {
    let lo = covers.from().to_rfc3339();
    let hi = covers.last().to_rfc3339();
    match shape {
        SkShape::Plain => (lo, format!("{hi}#{SK_UPPER}")),
        SkShape::Entity(entity) => (
            format!("{entity}#{lo}"),
            format!("{entity}#{hi}#{SK_UPPER}"),
        ),
    }
}

/// Collects queries, joining a query with an earlier one on the same PK.
struct Builder<'a> {
    queries: Vec<(String, TimeRange, SkShape<'a>)>,
    last_by_pk: HashMap<String, usize>,
    /// Cross-entity plans merge every piece of one PK (the hull stays inside one bucket of
    /// the requested range); single-entity plans merge only contiguous pieces.
    hull: bool,
}

impl<'a> Builder<'a> {
    fn new(hull: bool) -> Self {
        Builder {
            queries: Vec::new(),
            last_by_pk: HashMap::new(),
            hull,
        }
    }

    fn push(&mut self, pk: String, covers: TimeRange, shape: SkShape<'a>) -> Result<(), PlanError> {
        if let Some(&i) = self.last_by_pk.get(&pk) {
            let existing = &mut self.queries[i].1;
            if self.hull || existing.to() == covers.from() {
                *existing = existing.hull(&covers);
                return Ok(());
            }
        }
        if self.queries.len() >= MAX_PLAN_QUERIES {
            return Err(PlanError::TooLarge {
                limit: MAX_PLAN_QUERIES,
            });
        }
        self.last_by_pk.insert(pk.clone(), self.queries.len());
        self.queries.push((pk, covers, shape));
        Ok(())
    }

    fn entity_plan(self) -> ReadPlan {
        let queries = self
            .queries
            .into_iter()
            .map(|(pk, covers, shape)| KeyQuery {
                pk,
                sk_between: Some(sk_bounds(shape, covers)),
                time_filter: None,
                time_ordered: true,
                covers,
                block_window_ms: None,
                starts: None,
            })
            .collect();
        ReadPlan { queries }
    }

    fn all_plan(self) -> ReadPlan {
        let queries = self
            .queries
            .into_iter()
            .map(|(pk, covers, _)| KeyQuery {
                pk,
                sk_between: None,
                time_filter: Some(covers),
                time_ordered: false,
                covers,
                block_window_ms: None,
                starts: None,
            })
            .collect();
        ReadPlan { queries }
    }
}

/// The queries that read one entity's readings in `range`, across every table epoch,
/// fan-out epoch, bucket and sub-shard. The fan-out read at each instant is
/// [`FanoutHistory::read_fanout`]: the largest any writer can have keyed a reading of
/// that instant with. Keys nest, so under read fan-out k a `TimeBucket` entity is read
/// on its cold key plus sub-shards 1..=k, a `Random` or `Calculated` one on suffixes
/// 0..k. Each query is time-ordered; pieces of one PK that touch are joined, so a
/// `TimeBucket` entity that was never raised costs one query per bucket.
///
/// Where a layout in force packs readings into blocks, the plan reads back the block
/// window `W` before `range` ([`read_back`]).
pub fn plan_entity(
    entity: &str,
    range: TimeRange,
    table: &TableHistory,
    fanout: &FanoutHistory,
) -> Result<ReadPlan, PlanError> {
    validate_id("entity", entity)?;
    match block_window(table, range) {
        None => plan_entity_over(entity, range, table, fanout),
        Some(w) => Ok(read_back(
            plan_entity_over(entity, read_back_range(table, range, w), table, fanout)?,
            range,
            w,
        )),
    }
}

fn plan_entity_over(
    entity: &str,
    range: TimeRange,
    table: &TableHistory,
    fanout: &FanoutHistory,
) -> Result<ReadPlan, PlanError> {
    let mut builder = Builder::new(false);
    for (table_span, layout) in table.spans(range) {
        for (span, k) in fanout.read_spans(table_span, layout.default_fanout()) {
            let k = fanout_count(layout, Some(k)).get();
            match &layout.strategy {
                Strategy::Unsharded => builder.push(entity.to_owned(), span, SkShape::Plain)?,
                Strategy::Random | Strategy::Calculated { .. } => {
                    for r in 0..k {
                        builder.push(entity_pk(entity, r), span, SkShape::Plain)?;
                    }
                }
                Strategy::TimeBucket { bucket, sub_shards } => {
                    let s = shard_index(entity, layout.shards);
                    for piece in bucket.spans(span) {
                        // The cold key always: a writer with an older view keys with k = 1.
                        let cold = bucket_pk(s, None, &piece.label);
                        builder.push(cold, piece.range, SkShape::Entity(entity))?;
                        if k >= 2 {
                            for j in 1..=k {
                                let (shard, dedicated) = sub_shards.home(s, j, layout.shards);
                                let pk = bucket_pk(shard, dedicated, &piece.label);
                                builder.push(pk, piece.range, SkShape::Entity(entity))?;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(builder.entity_plan())
}

/// The queries that read every entity's readings in `range`. Only `TimeBucket` epochs
/// support it: for each bucket, each base key `{s}#{bucket}` for s in 0..N, plus the
/// dedicated sub-shard keys `{s}.{j}#{bucket}`, j in 1..=k, of each hot entity listed in
/// `hot` wherever its read fan-out k ([`FanoutHistory::read_fanout`]) is at least 2
/// (under [`SubShards::Base`](crate::layout::SubShards) only those with j >= N).
/// Items of such a PK are ordered by entity, then time: `time_ordered` is false and
/// `time_filter` holds the part of the range the query answers for.
///
/// `hot` must list every entity that has a fan-out history; an entity left out loses the
/// readings it wrote to sub-shards.
///
/// Where a layout in force packs readings into blocks, the plan reads back the block
/// window `W` before `range` ([`read_back`]): a reader's time filter (or the time
/// index's key condition) is then [`KeyQuery::starts`].
pub fn plan_all(
    range: TimeRange,
    table: &TableHistory,
    hot: &[(&str, &FanoutHistory)],
) -> Result<ReadPlan, PlanError> {
    for (entity, _) in hot {
        validate_id("entity", entity)?;
    }
    match block_window(table, range) {
        None => plan_all_over(range, table, hot),
        Some(w) => Ok(read_back(
            plan_all_over(read_back_range(table, range, w), table, hot)?,
            range,
            w,
        )),
    }
}

fn plan_all_over(
    range: TimeRange,
    table: &TableHistory,
    hot: &[(&str, &FanoutHistory)],
) -> Result<ReadPlan, PlanError> {
    let mut builder = Builder::new(true);
    for (span, layout) in table.spans(range) {
        let Strategy::TimeBucket { bucket, sub_shards } = &layout.strategy else {
            return Err(PlanError::Unsupported {
                strategy: layout.strategy.to_string(),
                span,
            });
        };
        let n = layout.shards;
        for piece in bucket.spans(span) {
            for s in 0..n.get() {
                builder.push(
                    bucket_pk(s, None, &piece.label),
                    piece.range,
                    SkShape::Plain,
                )?;
            }
            // Sub-shards on base shards were read above; the dedicated ones are listed.
            for (entity, history) in hot {
                let s = shard_index(entity, n);
                for (sub_span, k) in history.read_spans(piece.range, layout.default_fanout()) {
                    if k < 2 {
                        continue;
                    }
                    for j in (1..=k).filter(|&j| sub_shards.is_dedicated(j, n)) {
                        builder.push(
                            bucket_pk(s, Some(j), &piece.label),
                            sub_span,
                            SkShape::Plain,
                        )?;
                    }
                }
            }
        }
    }
    Ok(builder.all_plan())
}

/// The largest block window of the layouts that can have written a block holding a
/// reading of `range`: those in force over `range` and up to the longest window before
/// it. `None` when none packs readings into blocks.
fn block_window(table: &TableHistory, range: TimeRange) -> Option<u32> {
    table
        .spans(widened(range, MAX_WINDOW_MS))
        .iter()
        .filter_map(|(_, layout)| layout.block_window_ms())
        .max()
}

/// `range` with its start moved back by the block window `w`, but not past the start of
/// the table epoch or the time bucket its start is in: a block never spans either (the
/// writer groups within both), so no block that starts earlier holds a reading of
/// `range`. A range that starts a bucket reads no key of the bucket before it.
fn read_back_range(table: &TableHistory, range: TimeRange, w: u32) -> TimeRange {
    let from = range.from();
    let epoch_start = table
        .epochs()
        .iter()
        .rev()
        .find(|e| e.effective_from <= from)
        .map_or(Timestamp::MIN, |e| e.effective_from);
    let bucket_start = match &table.at(from).strategy {
        Strategy::TimeBucket { bucket, .. } => bucket.start(from),
        _ => Timestamp::MIN,
    };
    let widened = widened(range, w);
    TimeRange::new(
        widened.from().max(epoch_start).max(bucket_start),
        range.to(),
    )
    .unwrap_or(range)
}

/// `range` with its start moved `window_ms` earlier (at the earliest instant at most).
fn widened(range: TimeRange, window_ms: u32) -> TimeRange {
    let from = Timestamp::from_millis(range.from().as_millis() - i64::from(window_ms))
        .unwrap_or(Timestamp::MIN);
    TimeRange::new(from, range.to()).unwrap_or(range)
}

/// A plan made over `range` widened by the block window `w`, made to answer for
/// `range`: each query keeps the sort times it reads ([`KeyQuery::starts`]) and
/// answers for the readings its items can hold inside `range`, from its first sort
/// time to `w` after its last; a query whose items cannot hold one is dropped.
///
/// Why the whole plan is widened, not only its sort-key bounds: a block's key is its
/// first member's, made with the fan-out in force at that member's keying time, so a
/// reading at `t` can sit in a key the plan reads for an instant up to `w` before `t`.
/// Planning the widened range reads every such key. A block never spans a bucket or a
/// table epoch (the writer groups within both), so nothing older can hold a reading of
/// `range`.
///
/// A query over one entity's sort keys (bounds that begin with its time) becomes two:
/// the readings' own lane over the part of its times inside `range`, and the blocks'
/// lane (`crate::block::in_block_lane`) over all of them, so no item of one reading
/// outside `range` is evaluated.
fn read_back(plan: ReadPlan, range: TimeRange, w: u32) -> ReadPlan {
    let queries = plan
        .queries
        .into_iter()
        .flat_map(|q| lanes(q, range, w))
        .collect();
    ReadPlan { queries }
}

/// The queries `q` (of a plan widened by `w`) becomes to answer for `range`.
fn lanes(q: KeyQuery, range: TimeRange, w: u32) -> Vec<KeyQuery> {
    let starts = q.starts();
    let reach =
        Timestamp::from_millis(starts.to().as_millis() + i64::from(w)).unwrap_or(Timestamp::MAX);
    let Ok(covers) = TimeRange::new(starts.from().max(range.from()), reach.min(range.to())) else {
        return Vec::new();
    };
    let prefix = q
        .sk_between
        .as_ref()
        .and_then(|(lo, _)| lo.strip_suffix(&starts.from().to_rfc3339()))
        .map(str::to_owned);
    let Some(prefix) = prefix else {
        // No time in the sort key: the items of every lane, by their sort times.
        return vec![KeyQuery {
            time_filter: q.time_filter.map(|_| covers),
            covers,
            block_window_ms: Some(w),
            starts: Some(starts),
            ..q
        }];
    };
    let bounds = |lane: &str, r: TimeRange| {
        Some((
            format!("{prefix}{lane}{}", r.from().to_rfc3339()),
            format!("{prefix}{lane}{}#{SK_UPPER}", r.last().to_rfc3339()),
        ))
    };
    let mut out = Vec::with_capacity(2);
    let own = TimeRange::new(starts.from().max(range.from()), starts.to().min(range.to()))
        .ok()
        .filter(|r| r.from() < r.to());
    if let Some(own) = own {
        out.push(KeyQuery {
            sk_between: bounds("", own),
            covers: own,
            starts: None,
            block_window_ms: None,
            ..q.clone()
        });
    }
    out.push(KeyQuery {
        sk_between: bounds(BLOCK_LANE, starts),
        covers,
        block_window_ms: Some(w),
        starts: Some(starts),
        ..q
    });
    out
}

/// Whether `sk` lies within a query's inclusive sort-key bounds (always true without bounds).
#[must_use]
pub fn sk_in_bounds(query: &KeyQuery, sk: &str) -> bool {
    query
        .sk_between
        .as_ref()
        .is_none_or(|(lo, hi)| lo.as_str() <= sk && sk <= hi.as_str())
}

/// Whether `ts` passes a query's time filter (always true without a filter).
#[must_use]
pub fn passes_time_filter(query: &KeyQuery, ts: Timestamp) -> bool {
    query.time_filter.is_none_or(|f| f.contains(ts))
}
