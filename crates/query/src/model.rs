//! Wire types of the API and the merge key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sharding::time::Timestamp;

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
    /// Each number as the device sent it, in canonical decimal text: written and read
    /// as its text, never through a double (`store::decimal`).
    pub metrics: BTreeMap<String, store::Decimal>,
    pub tags: BTreeMap<String, String>,
}

/// The newest reading of a device (`GET /devices/{device_id}/latest`): the reading as
/// a page of readings holds it, and the instant the answer is exact at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatestOut {
    #[serde(flatten)]
    pub reading: ReadingOut,
    /// RFC 3339, UTC, milliseconds: the request's clock, which the look-back counts
    /// from (`crate::service::look_back`).
    pub as_of: String,
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
    /// The exact sum of the values as sent.
    pub sum: Exact,
    /// The least and the greatest value, as sent.
    pub min: Exact,
    pub max: Exact,
    /// `sum / count`, rounded once to a double.
    pub avg: f64,
}

/// An exact decimal as answered: a JSON number with all its digits, never through a
/// double (which keeps 17 significant digits of a stored number's 38, and a sum may
/// hold more than 38).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Exact(Box<RawValue>);

impl Exact {
    /// The number whose decimal text is `text` (`store::rollup::decimal_text`).
    pub fn of_text(text: String) -> Option<Self> {
        let raw = RawValue::from_string(text).ok()?;
        // A JSON value that is not a number (`null`, a string) is no decimal.
        raw.get()
            .starts_with(|c: char| c == '-' || c.is_ascii_digit())
            .then_some(Self(raw))
    }

    /// Its digits, as written.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for Exact {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsResponse {
    pub buckets: Vec<StatsBucket>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Formats epoch milliseconds as RFC 3339 UTC with milliseconds, e.g.
/// `2026-06-22T10:00:00.123Z`, the fixed-width form of [`Timestamp::to_rfc3339`].
/// `None` outside [`Timestamp`]'s years 0000 to 9999 (never for validated input: the
/// API's times lie from 1970 to 9999).
pub fn format_ts(ms: i64) -> Option<String> {
    Timestamp::from_millis(ms).ok().map(Timestamp::to_rfc3339)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_formatted_as_chrono_formats_them() {
        let chrono_form = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        };
        let max = crate::params::MAX_TS_MS;
        let mut samples = vec![0, 1, 999, 1_000, 1_782_086_400_000, 1_782_086_400_123, max];
        // Every month boundary of a leap year and around the turn of 2100, give or
        // take a millisecond.
        for base in [1_704_067_200_000_i64, 4_102_358_400_000] {
            for day in 0..400 {
                let at = base + day * 86_400_000;
                samples.extend([at - 1, at, at + 59_999]);
            }
        }
        for ms in samples {
            assert_eq!(format_ts(ms), chrono_form(ms), "{ms}");
        }
        assert_eq!(
            format_ts(1_782_086_400_123).as_deref(),
            Some("2026-06-22T00:00:00.123Z")
        );
        assert_eq!(format_ts(max + 1), None);
    }
}
