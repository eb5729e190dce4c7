//! The series routes' parameters (`GET /devices/{device_id}/series`, `GET /series`):
//! `metric`, `from`, `to`, `interval_ms` (Grafana's `${__interval_ms}`) and `agg`, and
//! the most points one answer holds.

use std::collections::BTreeMap;

use store::rollup::MINUTE_MS;

use super::{Limits, MAX_TS_MS, Range, metric_name, missing, parse_range, truncate};
use crate::error::{ApiError, codes};

/// Most points one series answer holds.
pub const MAX_SERIES_POINTS: i64 = 10_000;

/// What a series point holds: one figure of its bucket's cell of the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// `sum / count`, rounded once to a double (the default).
    Avg,
    Min,
    Max,
    /// How many values, an integer.
    Count,
    /// The exact sum, written as its decimal digits.
    Sum,
}

impl Agg {
    /// Its name in `agg=` and in the answer.
    pub fn name(self) -> &'static str {
        match self {
            Agg::Avg => "avg",
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Count => "count",
            Agg::Sum => "sum",
        }
    }

    fn parse(raw: Option<&str>) -> Result<Self, ApiError> {
        match raw {
            None | Some("avg") => Ok(Agg::Avg),
            Some("min") => Ok(Agg::Min),
            Some("max") => Ok(Agg::Max),
            Some("count") => Ok(Agg::Count),
            Some("sum") => Ok(Agg::Sum),
            Some(other) => Err(ApiError::bad_request(
                codes::BAD_PARAMETER,
                format!(
                    "agg must be avg, min, max, count or sum, not {:?}",
                    truncate(other, 40)
                ),
            )),
        }
    }
}

/// Validated parameters of a series route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesParams {
    pub range: Range,
    pub metric: String,
    /// The bucket width used (what the answer's `interval_ms` says): the one asked
    /// for, rounded up to a whole minute where the route rounds it
    /// ([`device_series_interval`], [`fleet_series_interval`]).
    pub interval_ms: i64,
    pub agg: Agg,
}

/// The interval a device series uses for `asked` ms: as asked below a minute (raw
/// readings), else rounded up to a whole minute (the sealed cells' unit).
pub fn device_series_interval(asked: i64) -> i64 {
    if asked < MINUTE_MS {
        asked
    } else {
        ceil_to(asked, MINUTE_MS)
    }
}

/// The interval the fleet series uses for `asked` ms: rounded up to a whole minute
/// (the fleet is sealed per minute).
pub fn fleet_series_interval(asked: i64) -> i64 {
    ceil_to(asked.max(1), MINUTE_MS)
}

/// How many buckets of `interval_ms`, aligned to multiples of it since the epoch, the
/// range touches: the most points its series can have.
pub fn series_points(range: Range, interval_ms: i64) -> i64 {
    (range.to_ms - 1).div_euclid(interval_ms) - range.from_ms.div_euclid(interval_ms) + 1
}

/// The smallest interval (as `used` rounds it) whose series of `range` has at most
/// [`MAX_SERIES_POINTS`] points.
fn smallest_fitting(range: Range, used: fn(i64) -> i64) -> i64 {
    let span = range.to_ms - range.from_ms;
    let mut interval = used((span + MAX_SERIES_POINTS - 1) / MAX_SERIES_POINTS);
    // Buckets aligned to the epoch add at most one to span / interval, so a few steps
    // up (one a ms below a minute, one a minute above) reach the first that fits.
    for _ in 0..1_000 {
        if series_points(range, interval) <= MAX_SERIES_POINTS {
            break;
        }
        interval = used(interval + 1);
    }
    interval
}

pub(super) fn series_params(
    params: &BTreeMap<String, String>,
    limits: &Limits,
    used: fn(i64) -> i64,
) -> Result<SeriesParams, ApiError> {
    let get = |name: &str| params.get(name).map(String::as_str);
    let range = parse_range(params, limits.max_device_range_ms)?;
    let raw = get("interval_ms").ok_or_else(|| missing("interval_ms"))?;
    let asked = parse_interval_ms(raw)?;
    let interval_ms = used(asked);
    let points = series_points(range, interval_ms);
    if points > MAX_SERIES_POINTS {
        let rounded = if interval_ms == asked {
            String::new()
        } else {
            format!(" (rounded up to {interval_ms})")
        };
        return Err(ApiError::bad_request(
            codes::BAD_INTERVAL,
            format!(
                "interval_ms {asked}{rounded} splits the range into {points} points; at most \
                 {MAX_SERIES_POINTS} are answered: the smallest interval_ms that fits is {}",
                smallest_fitting(range, used)
            ),
        ));
    }
    Ok(SeriesParams {
        range,
        metric: metric_name(get("metric").ok_or_else(|| missing("metric"))?)?,
        interval_ms,
        agg: Agg::parse(get("agg"))?,
    })
}

/// `interval_ms`: a positive integer of milliseconds (Grafana's `${__interval_ms}`).
fn parse_interval_ms(raw: &str) -> Result<i64, ApiError> {
    let bad = || {
        ApiError::bad_request(
            codes::BAD_INTERVAL,
            format!(
                "interval_ms must be a positive integer of milliseconds (at most \
                 {MAX_TS_MS}), not {:?}",
                truncate(raw, 40)
            ),
        )
    };
    if raw.is_empty() || raw.len() > 15 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match raw.parse::<i64>() {
        Ok(n) if (1..=MAX_TS_MS).contains(&n) => Ok(n),
        _ => Err(bad()),
    }
}

/// `ms` rounded up to a multiple of `unit`.
pub(crate) fn ceil_to(ms: i64, unit: i64) -> i64 {
    ms.div_euclid(unit) * unit + if ms.rem_euclid(unit) == 0 { 0 } else { unit }
}
