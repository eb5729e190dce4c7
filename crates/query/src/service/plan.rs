//! From a validated range to what the merged read reads: the time range, the read
//! plan's errors as API errors, and the plan's queries as merge streams.

use sharding::read_plan::{KeyQuery, PlanError, ReadPlan};
use sharding::time::TimeRange;

use crate::error::{ApiError, codes};
use crate::exec::StreamSpec;
use crate::params::Range;

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
    // The merge keeps what the query answers for; DynamoDB is asked for the sort
    // times of the items that can hold it (with blocks, from a window earlier).
    let index = time_index
        .filter(|_| !q.time_ordered && q.sk_between.is_none())
        .map(str::to_owned);
    StreamSpec {
        pk: q.pk.clone(),
        sk_between: q.sk_between.clone(),
        span: q.span_ms(),
        starts: q.starts_ms(),
        filter_time: q.time_filter.is_some(),
        time_ordered: q.time_ordered,
        index,
        block_window_ms: q.block_window_ms.map(i64::from),
        slab: None,
    }
}

pub(super) fn to_time_range(r: Range) -> Result<TimeRange, ApiError> {
    TimeRange::of_millis(r.from_ms, r.to_ms).map_err(|e| ApiError::bad_range(e.to_string()))
}

pub(super) fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::Key(k) => ApiError::bad_request(codes::BAD_ID, k.to_string()),
        PlanError::Unsupported { .. } => ApiError::bad_request(codes::NOT_SUPPORTED, e.to_string()),
        PlanError::TooLarge { .. } => ApiError::bad_request(codes::RANGE_TOO_LARGE, e.to_string()),
    }
}
