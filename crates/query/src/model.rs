//! Wire types of the API and the merge key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The total order readings come back in: time, then device, then event id. Unique
/// per reading (a device never reuses an event id). For one device's reads the device
/// part is constant, so the order reduces to (time, event id).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReadingKey {
    pub ts_ms: i64,
    pub device_id: String,
    pub event_id: String,
}

impl sharding::merge::TimedKey for ReadingKey {
    fn ts_ms(&self) -> i64 {
        self.ts_ms
    }
}

/// One reading as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadingOut {
    pub device_id: String,
    pub event_id: String,
    /// RFC 3339, UTC, milliseconds.
    pub ts: String,
    pub metrics: BTreeMap<String, f64>,
    pub tags: BTreeMap<String, String>,
}

/// A page of readings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadingsPage {
    pub items: Vec<ReadingOut>,
    pub next_cursor: Option<String>,
}

/// One downsampling bucket: `[start, start + interval)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsBucket {
    /// RFC 3339, UTC, milliseconds.
    pub start: String,
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub avg: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsResponse {
    pub buckets: Vec<StatsBucket>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Formats epoch milliseconds as RFC 3339 UTC with milliseconds, e.g.
/// `2026-06-22T10:00:00.123Z`. `None` outside chrono's range (never for validated input).
pub fn format_ts(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}
