//! Routing and parameter validation: pure functions from (method, path, query string)
//! to a fully validated [`Endpoint`], or the 4xx that names what is wrong. Nothing here
//! touches DynamoDB, so a bad request never costs a read.

use std::collections::BTreeMap;

use sharding::key::{MAX_METRIC_NAME, is_metric_name};
use store::rollup::MINUTE_MS;

use crate::error::{ApiError, codes};

mod series;

pub(crate) use series::ceil_to;
use series::series_params;
pub use series::{
    Agg, MAX_SERIES_POINTS, SeriesParams, device_series_interval, fleet_series_interval,
    series_points,
};

/// Largest page a client may ask for.
pub const MAX_LIMIT: u32 = 1000;
/// Page size when `limit` is absent.
pub const DEFAULT_LIMIT: u32 = 100;
/// Latest instant accepted (9999-12-31T23:59:59.999Z): keeps every timestamp
/// formattable as RFC 3339.
pub const MAX_TS_MS: i64 = 253_402_300_799_999;
/// Longest raw query string accepted.
pub const MAX_QUERY_LEN: usize = 8192;

/// Per-deployment caps on what one request may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Widest range for one device's readings and stats.
    pub max_device_range_ms: i64,
    /// Widest range for every device's readings.
    pub max_all_range_ms: i64,
    /// Most buckets a stats answer may have (`range / interval`), which bounds the
    /// response size.
    pub max_stats_buckets: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_device_range_ms: 31 * 24 * 3_600_000,
            max_all_range_ms: 24 * 3_600_000,
            max_stats_buckets: 10_000,
        }
    }
}

/// A route with its path parameters, before the query string is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    DeviceReadings {
        device: String,
    },
    Reading {
        device: String,
        event_id: String,
    },
    AllReadings,
    Stats {
        device: String,
    },
    Shards {
        device: String,
    },
    Latest {
        device: String,
    },
    /// `GET /devices`: the device directory.
    Devices,
    /// `GET /stats`: the fleet's sealed buckets.
    FleetStats,
    /// `GET /devices/{device_id}/series`: one metric of one device as points.
    DeviceSeries {
        device: String,
    },
    /// `GET /series`: one metric of the fleet as points, from the sealed hours.
    FleetSeries,
}

impl Route {
    /// Stable name, part of what cursors are bound to, and of logs.
    pub fn name(&self) -> &'static str {
        match self {
            Route::DeviceReadings { .. } => "device_readings",
            Route::Reading { .. } => "reading",
            Route::AllReadings => "all_readings",
            Route::Stats { .. } => "stats",
            Route::Shards { .. } => "shards",
            Route::Latest { .. } => "latest",
            Route::Devices => "devices",
            Route::FleetStats => "fleet_stats",
            Route::DeviceSeries { .. } => "device_series",
            Route::FleetSeries => "fleet_series",
        }
    }

    fn allowed(&self) -> &'static [&'static str] {
        match self {
            Route::DeviceReadings { .. } | Route::AllReadings => {
                &["from", "to", "limit", "order", "cursor", "consistent"]
            }
            Route::Reading { .. } => &["ts", "consistent"],
            Route::Latest { .. } => &["consistent"],
            Route::Stats { .. } => &["from", "to", "interval", "metric", "consistent", "cursor"],
            Route::Shards { .. } => &[],
            Route::Devices => &["prefix", "seen_since", "limit", "cursor"],
            Route::FleetStats => &["from", "to", "interval", "metric", "cursor"],
            Route::DeviceSeries { .. } => {
                &["metric", "from", "to", "interval_ms", "agg", "consistent"]
            }
            Route::FleetSeries => &["metric", "from", "to", "interval_ms", "agg"],
        }
    }
}

/// Half-open `[from_ms, to_ms)` in epoch milliseconds, `from_ms < to_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from_ms: i64,
    pub to_ms: i64,
}

/// Validated parameters of a readings route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadParams {
    pub range: Range,
    pub limit: u32,
    pub descending: bool,
    /// Still sealed: opened against the request's binding by the handler.
    pub cursor: Option<String>,
    pub consistent: bool,
}

/// A fully validated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    DeviceReadings {
        device: String,
        read: ReadParams,
    },
    AllReadings {
        read: ReadParams,
    },
    Reading {
        device: String,
        event_id: String,
        ts_ms: i64,
        consistent: bool,
    },
    Stats {
        device: String,
        range: Range,
        interval_ms: i64,
        metric: String,
        consistent: bool,
        /// `next_cursor` of the previous page of this request.
        cursor: Option<String>,
    },
    Shards {
        device: String,
    },
    /// The device's newest reading (`crate::service`'s `latest` module says how far
    /// back it looks).
    Latest {
        device: String,
        consistent: bool,
    },
    /// The device list, from the sealer's directory.
    Devices {
        /// Only ids starting with this.
        prefix: Option<String>,
        /// Only devices last seen at or after this (epoch ms).
        seen_since_ms: Option<i64>,
        limit: u32,
        cursor: Option<String>,
    },
    /// The fleet's buckets, from the sealer's fleet parts.
    FleetStats {
        range: Range,
        /// A whole number of minutes.
        interval_ms: i64,
        /// Only this metric's cells; `None`: every metric's.
        metric: Option<String>,
        cursor: Option<String>,
    },
    /// One device's metric as points: sealed cells and raw readings, as its stats.
    DeviceSeries {
        device: String,
        series: SeriesParams,
        consistent: bool,
    },
    /// The fleet's metric as points, from the sealer's fleet parts.
    FleetSeries {
        series: SeriesParams,
    },
}

impl Endpoint {
    /// The device a device route reads; `None` for the read over every device.
    pub fn device(&self) -> Option<&str> {
        match self {
            Endpoint::DeviceReadings { device, .. }
            | Endpoint::Reading { device, .. }
            | Endpoint::Stats { device, .. }
            | Endpoint::Shards { device }
            | Endpoint::Latest { device, .. }
            | Endpoint::DeviceSeries { device, .. } => Some(device),
            Endpoint::AllReadings { .. }
            | Endpoint::Devices { .. }
            | Endpoint::FleetStats { .. }
            | Endpoint::FleetSeries { .. } => None,
        }
    }
}

/// Routes and validates a request. 404 for an unknown path, 405 for a method other
/// than GET on a known path, 400 for any bad parameter.
pub fn parse_request(
    method: &str,
    path: &str,
    query: Option<&str>,
    limits: &Limits,
) -> Result<Endpoint, ApiError> {
    let route = match_route(path)?;
    if method != "GET" {
        return Err(ApiError::method_not_allowed(method));
    }
    parse_params(route, query, limits)
}

/// Matches a path (percent-encoded, as in a URI) to a route and validates its ids.
pub fn match_route(path: &str) -> Result<Route, ApiError> {
    let not_found = || ApiError::not_found(format!("no route for {}", truncate(path, 200)));
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let raw: Vec<&str> = trimmed.split('/').collect();
    // A path starts with '/', so the first segment is empty.
    let segs: &[&str] = match raw.split_first() {
        Some((&"", rest)) => rest,
        _ => return Err(not_found()),
    };
    let device = || canonical_id("device_id", segs[1]).and_then(device_id);
    match segs {
        ["readings"] => Ok(Route::AllReadings),
        ["devices"] => Ok(Route::Devices),
        ["stats"] => Ok(Route::FleetStats),
        ["series"] => Ok(Route::FleetSeries),
        ["devices", _, "readings"] => Ok(Route::DeviceReadings { device: device()? }),
        ["devices", _, "readings", _] => Ok(Route::Reading {
            device: device()?,
            event_id: event_id(canonical_id("event_id", segs[3])?)?,
        }),
        ["devices", _, "stats"] => Ok(Route::Stats { device: device()? }),
        ["devices", _, "shards"] => Ok(Route::Shards { device: device()? }),
        ["devices", _, "latest"] => Ok(Route::Latest { device: device()? }),
        ["devices", _, "series"] => Ok(Route::DeviceSeries { device: device()? }),
        _ => Err(not_found()),
    }
}

/// An id's path segment, as sent. Every character of an id (`[A-Za-z0-9._:-]`) is one
/// a URI carries as it is, so an id has one spelling in a path; a percent-encoded
/// character is refused, whether it decodes into that alphabet (`sensor%2Dalpha-001`,
/// another spelling of `sensor-alpha-001` that a rule written against paths, such as
/// an `execute-api:Invoke` resource, would not match) or out of it (no id holds it).
fn canonical_id<'a>(name: &str, raw: &'a str) -> Result<&'a str, ApiError> {
    if !raw.contains('%') {
        return Ok(raw);
    }
    let spelled = match percent_decode(raw) {
        Some(decoded) if sharding::key::validate_id("id", &decoded).is_ok() => {
            format!("; write it as {:?}", truncate(&decoded, 40))
        }
        _ => String::new(),
    };
    Err(ApiError::bad_request(
        codes::BAD_ID,
        format!(
            "{name} must be written without percent-encoding (got {:?}){spelled}",
            truncate(raw, 40)
        ),
    ))
}

/// Validates the query string for `route`. Every parameter is checked here, before
/// anything is read: unknown or repeated names, then each value.
pub fn parse_params(
    route: Route,
    query: Option<&str>,
    limits: &Limits,
) -> Result<Endpoint, ApiError> {
    let params = split_query(query.unwrap_or(""), route.allowed())?;
    let get = |name: &str| params.get(name).map(String::as_str);
    let consistent = parse_bool("consistent", get("consistent"))?;
    match route {
        Route::DeviceReadings { device } => Ok(Endpoint::DeviceReadings {
            read: read_params(&params, limits.max_device_range_ms, consistent)?,
            device,
        }),
        Route::AllReadings => Ok(Endpoint::AllReadings {
            read: read_params(&params, limits.max_all_range_ms, consistent)?,
        }),
        Route::Reading { device, event_id } => {
            let ts = get("ts").ok_or_else(|| missing("ts"))?;
            Ok(Endpoint::Reading {
                device,
                event_id,
                ts_ms: parse_ts("ts", ts)?,
                consistent,
            })
        }
        Route::Stats { device } => {
            let range = parse_range(&params, limits.max_device_range_ms)?;
            let interval = get("interval").ok_or_else(|| missing("interval"))?;
            let interval_ms = parse_interval(interval)?;
            let span = range.to_ms - range.from_ms;
            let buckets = span / interval_ms + i64::from(span % interval_ms != 0);
            if buckets > limits.max_stats_buckets {
                return Err(ApiError::bad_request(
                    codes::BAD_INTERVAL,
                    format!(
                        "interval {interval} splits the range into {buckets} buckets; \
                         at most {} are allowed",
                        limits.max_stats_buckets
                    ),
                ));
            }
            let metric = get("metric").ok_or_else(|| missing("metric"))?;
            Ok(Endpoint::Stats {
                device,
                range,
                interval_ms,
                metric: metric_name(metric)?,
                consistent,
                cursor: cursor_param(get("cursor"))?,
            })
        }
        Route::Shards { device } => Ok(Endpoint::Shards { device }),
        Route::Latest { device } => Ok(Endpoint::Latest { device, consistent }),
        Route::Devices => Ok(Endpoint::Devices {
            prefix: get("prefix").map(id_prefix).transpose()?,
            seen_since_ms: get("seen_since")
                .map(|raw| parse_ts("seen_since", raw))
                .transpose()?,
            limit: get("limit").map_or(Ok(DEFAULT_LIMIT), parse_limit)?,
            cursor: cursor_param(get("cursor"))?,
        }),
        Route::FleetStats => {
            let range = parse_range(&params, limits.max_device_range_ms)?;
            let interval = get("interval").ok_or_else(|| missing("interval"))?;
            let interval_ms = parse_interval(interval)?;
            if interval_ms % MINUTE_MS != 0 {
                return Err(ApiError::bad_request(
                    codes::BAD_INTERVAL,
                    format!(
                        "interval {} is not a whole number of minutes; the fleet's stats are \
                         sealed per minute (e.g. 1m, 5m, 1h, 1d)",
                        truncate(interval, 40)
                    ),
                ));
            }
            Ok(Endpoint::FleetStats {
                range,
                interval_ms,
                metric: get("metric").map(metric_name).transpose()?,
                cursor: cursor_param(get("cursor"))?,
            })
        }
        Route::DeviceSeries { device } => Ok(Endpoint::DeviceSeries {
            series: series_params(&params, limits, device_series_interval)?,
            device,
            consistent,
        }),
        Route::FleetSeries => Ok(Endpoint::FleetSeries {
            series: series_params(&params, limits, fleet_series_interval)?,
        }),
    }
}

/// An id prefix: a non-empty start of an id, by the rule of ids.
fn id_prefix(raw: &str) -> Result<String, ApiError> {
    check_id("prefix", raw)
}

fn read_params(
    params: &BTreeMap<String, String>,
    max_range_ms: i64,
    consistent: bool,
) -> Result<ReadParams, ApiError> {
    let range = parse_range(params, max_range_ms)?;
    let limit = match params.get("limit") {
        None => DEFAULT_LIMIT,
        Some(raw) => parse_limit(raw)?,
    };
    let descending = match params.get("order").map(String::as_str) {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                codes::BAD_ORDER,
                format!("order must be asc or desc, not {:?}", truncate(other, 40)),
            ));
        }
    };
    let cursor = cursor_param(params.get("cursor").map(String::as_str))?;
    Ok(ReadParams {
        range,
        limit,
        descending,
        cursor,
        consistent,
    })
}

/// The `cursor` parameter, opened later against the request it must belong to.
fn cursor_param(raw: Option<&str>) -> Result<Option<String>, ApiError> {
    match raw {
        Some("") => Err(ApiError::bad_cursor("cursor is empty")),
        other => Ok(other.map(str::to_owned)),
    }
}

fn parse_limit(raw: &str) -> Result<u32, ApiError> {
    let bad = || {
        ApiError::bad_request(
            codes::BAD_LIMIT,
            format!(
                "limit must be an integer from 1 to {MAX_LIMIT}, not {:?}",
                truncate(raw, 40)
            ),
        )
    };
    if raw.is_empty() || raw.len() > 4 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u32 = raw.parse().map_err(|_| bad())?;
    if n == 0 || n > MAX_LIMIT {
        return Err(bad());
    }
    Ok(n)
}

fn parse_range(params: &BTreeMap<String, String>, max_range_ms: i64) -> Result<Range, ApiError> {
    let from = params.get("from").ok_or_else(|| missing("from"))?;
    let to = params.get("to").ok_or_else(|| missing("to"))?;
    let from_ms = parse_ts("from", from)?;
    let to_ms = parse_ts("to", to)?;
    if from_ms >= to_ms {
        return Err(ApiError::bad_range(format!(
            "from ({from}) must be before to ({to}); the range is half-open [from, to)",
            from = truncate(from, 40),
            to = truncate(to, 40)
        )));
    }
    if to_ms - from_ms > max_range_ms {
        return Err(ApiError::bad_request(
            codes::RANGE_TOO_LARGE,
            format!(
                "range from..to spans {} ms; this route allows at most {max_range_ms} ms ({})",
                to_ms - from_ms,
                describe_ms(max_range_ms)
            ),
        ));
    }
    Ok(Range { from_ms, to_ms })
}

/// Parses RFC 3339 (any offset) or epoch milliseconds by the one rule every function
/// reads a time bound with (`sharding::time::parse_bound`), naming the parameter and
/// why when it is refused.
pub fn parse_ts(name: &str, raw: &str) -> Result<i64, ApiError> {
    sharding::time::parse_bound(raw)
        .map(sharding::time::Timestamp::as_millis)
        .map_err(|why| {
            ApiError::bad_range(format!(
                "{name} must be RFC 3339 or epoch milliseconds ({why}): {:?}",
                truncate(raw, 40)
            ))
        })
}

/// `30s`, `5m`, `1h`, `1d`: a positive integer and a unit.
pub fn parse_interval(raw: &str) -> Result<i64, ApiError> {
    let bad = || {
        ApiError::bad_request(
            codes::BAD_INTERVAL,
            format!(
                "interval must be a positive integer and a unit s, m, h or d (e.g. 30s, 5m, 1h, 1d), not {:?}",
                truncate(raw, 40)
            ),
        )
    };
    let unit_at = raw.len().checked_sub(1).ok_or_else(bad)?;
    if !raw.is_char_boundary(unit_at) {
        return Err(bad());
    }
    let (num, unit) = raw.split_at(unit_at);
    let unit_ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    if num.is_empty() || num.len() > 6 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: i64 = num.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    Ok(n * unit_ms)
}

fn parse_bool(name: &str, raw: Option<&str>) -> Result<bool, ApiError> {
    match raw {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::bad_request(
            codes::BAD_PARAMETER,
            format!(
                "{name} must be true or false, not {:?}",
                truncate(other, 40)
            ),
        )),
    }
}

/// Device ids: as `sharding::key::validate_id` accepts them (1 to 128 bytes of
/// `[A-Za-z0-9._:-]`; `#` separates key components and is never part of an id).
pub fn device_id(raw: &str) -> Result<String, ApiError> {
    check_id("device_id", raw)
}

/// Event ids: same rule as device ids.
pub fn event_id(raw: &str) -> Result<String, ApiError> {
    check_id("event_id", raw)
}

fn check_id(name: &'static str, raw: &str) -> Result<String, ApiError> {
    sharding::key::validate_id(name, raw)
        .map(|()| raw.to_string())
        .map_err(|e| {
            ApiError::bad_request(codes::BAD_ID, format!("{e} (got {:?})", truncate(raw, 40)))
        })
}

/// A metric name by the rule the ingest stores them under
/// (`sharding::key::is_metric_name`): a name no reading can carry is refused, not
/// answered with nothing.
fn metric_name(raw: &str) -> Result<String, ApiError> {
    if is_metric_name(raw) {
        Ok(raw.to_string())
    } else {
        Err(ApiError::bad_request(
            codes::BAD_PARAMETER,
            format!(
                "metric must be 1 to {MAX_METRIC_NAME} characters from A-Z a-z 0-9 _, not {:?}",
                truncate(raw, 40)
            ),
        ))
    }
}

fn missing(name: &str) -> ApiError {
    ApiError::bad_request(
        codes::MISSING_PARAMETER,
        format!("parameter {name} is required"),
    )
}

/// Splits and percent-decodes a raw query string, refusing names not in `allowed`
/// and names given twice. `+` is kept literally: RFC 3339 offsets such as `+02:00`
/// often arrive unencoded, and no parameter value contains a space.
fn split_query(raw: &str, allowed: &[&str]) -> Result<BTreeMap<String, String>, ApiError> {
    if raw.len() > MAX_QUERY_LEN {
        return Err(ApiError::bad_request(
            codes::BAD_PARAMETER,
            format!("query string is longer than {MAX_QUERY_LEN} bytes"),
        ));
    }
    let mut out = BTreeMap::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_decode(k).ok_or_else(|| {
            ApiError::bad_request(
                codes::BAD_PARAMETER,
                format!(
                    "parameter name {:?} is not valid percent-encoded UTF-8",
                    truncate(k, 40)
                ),
            )
        })?;
        if !allowed.contains(&name.as_str()) {
            let hint = if allowed.is_empty() {
                "this route takes no parameters".to_string()
            } else {
                format!("allowed: {}", allowed.join(", "))
            };
            return Err(ApiError::bad_request(
                codes::UNKNOWN_PARAMETER,
                format!("unknown parameter {:?}; {hint}", truncate(&name, 40)),
            ));
        }
        let value = percent_decode(v).ok_or_else(|| {
            ApiError::bad_request(
                codes::BAD_PARAMETER,
                format!("parameter {name} is not valid percent-encoded UTF-8"),
            )
        })?;
        if out.insert(name.clone(), value).is_some() {
            return Err(ApiError::bad_request(
                codes::DUPLICATE_PARAMETER,
                format!("parameter {name} is given more than once"),
            ));
        }
    }
    Ok(out)
}

/// Decodes `%XX` escapes; `None` for a broken escape or bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = hex_val(*bytes.get(i + 1)?)?;
            let lo = hex_val(*bytes.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Cuts echoed input so an error message stays short; respects char boundaries.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn describe_ms(ms: i64) -> String {
    if ms % 86_400_000 == 0 && ms > 86_400_000 {
        format!("{} days", ms / 86_400_000)
    } else if ms % 3_600_000 == 0 {
        format!("{} hours", ms / 3_600_000)
    } else {
        format!("{} seconds", ms / 1000)
    }
}
