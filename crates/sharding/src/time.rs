//! Timestamps, half-open time ranges and time buckets.
//!
//! A [`Timestamp`] is milliseconds since the Unix epoch, UTC, limited to the years
//! 0000..=9999 so that its RFC 3339 form has a fixed width (`2026-06-22T01:00:00.000Z`,
//! 24 characters) and string order equals time order. Sort keys rely on that.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// Why a time value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// Outside 0000-01-01T00:00:00.000Z ..= 9999-12-31T23:59:59.999Z.
    #[error("timestamp {millis} ms is outside the years 0000..=9999")]
    OutOfRange {
        /// The refused value, in ms since the Unix epoch.
        millis: i64,
    },
    /// Neither RFC 3339 nor an integer count of milliseconds.
    #[error("{input:?} is neither an RFC 3339 timestamp nor integer epoch milliseconds")]
    Unparsable {
        /// The refused text.
        input: String,
    },
    /// A range whose start is not before its end.
    #[error("empty time range: from {from} is not before to {to}")]
    EmptyRange {
        /// Start of the refused range.
        from: Timestamp,
        /// End of the refused range.
        to: Timestamp,
    },
    /// Not one of `minute`, `hour`, `day`, `month`.
    #[error("unknown bucket {input:?}: expected minute, hour, day or month")]
    UnknownBucket {
        /// The refused text.
        input: String,
    },
}

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_DAY: i64 = 86_400_000;

/// Milliseconds since the Unix epoch, UTC, within the years 0000..=9999.
///
/// Serialized as the integer millisecond count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Timestamp(i64);

impl Timestamp {
    /// 0000-01-01T00:00:00.000Z, the beginning of time for shard epochs.
    pub const MIN: Timestamp = Timestamp(-62_167_219_200_000);
    /// 9999-12-31T23:59:59.999Z.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);

    /// A timestamp from milliseconds since the Unix epoch.
    pub fn from_millis(millis: i64) -> Result<Self, TimeError> {
        if (Self::MIN.0..=Self::MAX.0).contains(&millis) {
            Ok(Timestamp(millis))
        } else {
            Err(TimeError::OutOfRange { millis })
        }
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, or `None` past [`Timestamp::MAX`].
    #[must_use]
    pub fn checked_add(self, d: Duration) -> Option<Self> {
        let ms = i64::try_from(d.as_millis()).ok()?;
        Self::from_millis(self.0.checked_add(ms)?).ok()
    }

    /// `self - d`, or `None` before [`Timestamp::MIN`].
    #[must_use]
    pub fn checked_sub(self, d: Duration) -> Option<Self> {
        let ms = i64::try_from(d.as_millis()).ok()?;
        Self::from_millis(self.0.checked_sub(ms)?).ok()
    }

    /// `self + d`, clamped to [`Timestamp::MAX`].
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        self.checked_add(d).unwrap_or(Self::MAX)
    }

    /// `self + ms` clamped to the valid range (internal arithmetic on bucket bounds).
    fn offset_clamped(self, ms: i64) -> Self {
        Timestamp(self.0.saturating_add(ms).clamp(Self::MIN.0, Self::MAX.0))
    }

    /// The previous millisecond, clamped to [`Timestamp::MIN`].
    #[must_use]
    pub fn pred(self) -> Self {
        self.offset_clamped(-1)
    }

    /// The next millisecond, clamped to [`Timestamp::MAX`].
    #[must_use]
    pub fn succ(self) -> Self {
        self.offset_clamped(1)
    }

    fn datetime(self) -> DateTime<Utc> {
        // Every value in MIN..=MAX is representable by chrono (its range is far wider).
        DateTime::from_timestamp_millis(self.0).unwrap_or_default()
    }

    /// RFC 3339, UTC, milliseconds, fixed width: `2026-06-22T01:00:00.000Z`.
    #[must_use]
    pub fn to_rfc3339(self) -> String {
        self.datetime().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    }

    /// Parses RFC 3339 (any offset; sub-millisecond digits are truncated) or an integer
    /// count of milliseconds since the Unix epoch.
    pub fn parse(input: &str) -> Result<Self, TimeError> {
        let text = input.trim();
        let unparsable = || TimeError::Unparsable {
            input: input.to_owned(),
        };
        let digits = text.strip_prefix('-').unwrap_or(text);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            let millis: i64 = text.parse().map_err(|_| unparsable())?;
            return Self::from_millis(millis);
        }
        let parsed = DateTime::parse_from_rfc3339(text).map_err(|_| unparsable())?;
        Self::from_millis(parsed.timestamp_millis())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl FromStr for Timestamp {
    type Err = TimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<i64> for Timestamp {
    type Error = TimeError;
    fn try_from(millis: i64) -> Result<Self, Self::Error> {
        Self::from_millis(millis)
    }
}

impl From<Timestamp> for i64 {
    fn from(ts: Timestamp) -> i64 {
        ts.0
    }
}

/// A half-open time range `[from, to)`, never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawRange")]
pub struct TimeRange {
    from: Timestamp,
    to: Timestamp,
}

#[derive(Deserialize)]
struct RawRange {
    from: Timestamp,
    to: Timestamp,
}

impl TryFrom<RawRange> for TimeRange {
    type Error = TimeError;
    fn try_from(raw: RawRange) -> Result<Self, Self::Error> {
        TimeRange::new(raw.from, raw.to)
    }
}

impl TimeRange {
    /// `[from, to)`; refuses `from >= to`.
    pub fn new(from: Timestamp, to: Timestamp) -> Result<Self, TimeError> {
        if from < to {
            Ok(TimeRange { from, to })
        } else {
            Err(TimeError::EmptyRange { from, to })
        }
    }

    /// Inclusive start.
    #[must_use]
    pub const fn from(&self) -> Timestamp {
        self.from
    }

    /// Exclusive end.
    #[must_use]
    pub const fn to(&self) -> Timestamp {
        self.to
    }

    /// The last millisecond inside the range (`to - 1 ms`).
    #[must_use]
    pub fn last(&self) -> Timestamp {
        self.to.pred()
    }

    /// Whether `ts` lies in `[from, to)`.
    #[must_use]
    pub fn contains(&self, ts: Timestamp) -> bool {
        self.from <= ts && ts < self.to
    }

    /// The overlap of two ranges, if any.
    #[must_use]
    pub fn intersect(&self, other: &TimeRange) -> Option<TimeRange> {
        TimeRange::new(self.from.max(other.from), self.to.min(other.to)).ok()
    }

    /// The smallest range containing both.
    #[must_use]
    pub fn hull(&self, other: &TimeRange) -> TimeRange {
        TimeRange {
            from: self.from.min(other.from),
            to: self.to.max(other.to),
        }
    }

    /// Length in milliseconds.
    #[must_use]
    pub fn len_millis(&self) -> i64 {
        self.to.0 - self.from.0
    }
}

impl fmt::Display for TimeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.from, self.to)
    }
}

/// Granularity of the time bucket in a `TimeBucket` partition key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    /// `2026-06-22T01:05`
    Minute,
    /// `2026-06-22T01`
    Hour,
    /// `2026-06-22`
    Day,
    /// `2026-06`
    Month,
}

impl Bucket {
    /// Every granularity, finest first.
    pub const ALL: [Bucket; 4] = [Bucket::Minute, Bucket::Hour, Bucket::Day, Bucket::Month];

    /// The lowercase name used in configuration.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Bucket::Minute => "minute",
            Bucket::Hour => "hour",
            Bucket::Day => "day",
            Bucket::Month => "month",
        }
    }

    /// The label of the bucket holding `ts`: `2026-06-22T01:05`, `2026-06-22T01`,
    /// `2026-06-22` or `2026-06`.
    #[must_use]
    pub fn label(self, ts: Timestamp) -> String {
        let pattern = match self {
            Bucket::Minute => "%Y-%m-%dT%H:%M",
            Bucket::Hour => "%Y-%m-%dT%H",
            Bucket::Day => "%Y-%m-%d",
            Bucket::Month => "%Y-%m",
        };
        ts.datetime().format(pattern).to_string()
    }

    /// Start of the bucket holding `ts`.
    #[must_use]
    pub fn start(self, ts: Timestamp) -> Timestamp {
        let ms = ts.0;
        match self {
            Bucket::Minute => Timestamp(ms - ms.rem_euclid(MS_PER_MINUTE)),
            Bucket::Hour => Timestamp(ms - ms.rem_euclid(MS_PER_HOUR)),
            Bucket::Day => Timestamp(ms - ms.rem_euclid(MS_PER_DAY)),
            Bucket::Month => {
                let d = ts.datetime();
                month_start(d.year(), d.month()).unwrap_or(ts)
            }
        }
    }

    /// Start of the bucket after the one holding `ts`. Clamped to [`Timestamp::MAX`]
    /// in the last bucket of year 9999 (no range can reach past `MAX`).
    #[must_use]
    pub fn next_start(self, ts: Timestamp) -> Timestamp {
        let start = self.start(ts);
        match self {
            Bucket::Minute => start.offset_clamped(MS_PER_MINUTE),
            Bucket::Hour => start.offset_clamped(MS_PER_HOUR),
            Bucket::Day => start.offset_clamped(MS_PER_DAY),
            Bucket::Month => {
                let d = ts.datetime();
                let (year, month) = if d.month() == 12 {
                    (d.year() + 1, 1)
                } else {
                    (d.year(), d.month() + 1)
                };
                month_start(year, month).unwrap_or(Timestamp::MAX)
            }
        }
    }

    /// The buckets intersecting `range`, in time order, each clipped to `range`.
    #[must_use]
    pub fn spans(self, range: TimeRange) -> BucketSpans {
        BucketSpans {
            bucket: self,
            next: Some(range.from),
            end: range.to,
        }
    }
}

fn month_start(year: i32, month: u32) -> Option<Timestamp> {
    let date = NaiveDate::from_ymd_opt(year, month, 1)?;
    let millis = date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
    Timestamp::from_millis(millis).ok()
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Bucket {
    type Err = TimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Bucket::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| TimeError::UnknownBucket {
                input: s.to_owned(),
            })
    }
}

/// One bucket of a range: its label and the part of the range inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSpan {
    /// The bucket's label, as in partition keys.
    pub label: String,
    /// The bucket clipped to the iterated range.
    pub range: TimeRange,
}

/// Iterator over the buckets of a range; see [`Bucket::spans`].
#[derive(Debug, Clone)]
pub struct BucketSpans {
    bucket: Bucket,
    next: Option<Timestamp>,
    end: Timestamp,
}

impl Iterator for BucketSpans {
    type Item = BucketSpan;

    fn next(&mut self) -> Option<BucketSpan> {
        let from = self.next?;
        let to = self.bucket.next_start(from).min(self.end);
        let range = TimeRange::new(from, to).ok()?;
        self.next = (to < self.end).then_some(to);
        Some(BucketSpan {
            label: self.bucket.label(from),
            range,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("valid timestamp")
    }

    #[test]
    fn bounds_format_with_fixed_width() {
        assert_eq!(Timestamp::MIN.to_rfc3339(), "0000-01-01T00:00:00.000Z");
        assert_eq!(Timestamp::MAX.to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert!(Timestamp::from_millis(Timestamp::MAX.as_millis() + 1).is_err());
        assert!(Timestamp::from_millis(Timestamp::MIN.as_millis() - 1).is_err());
    }

    #[test]
    fn month_of_december_ends_at_new_year() {
        let t = ts("2026-12-31T23:59:59.999Z");
        assert_eq!(Bucket::Month.next_start(t), ts("2027-01-01T00:00:00Z"));
        assert_eq!(Bucket::Month.next_start(Timestamp::MAX), Timestamp::MAX);
    }
}
