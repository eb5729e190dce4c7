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

mod bound;
pub use bound::{BoundError, MAX_BOUND_CHARS, MAX_BOUND_DIGITS, bound_of_millis, parse_bound};

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
        let mut out = String::with_capacity(RFC3339_LEN);
        self.write_rfc3339(&mut out);
        out
    }

    /// Appends [`Timestamp::to_rfc3339`] to `out` (no allocation of its own; keys are
    /// built on the ingest hot path, where chrono's format-string interpreter cost
    /// more than the rest of the key).
    pub fn write_rfc3339(self, out: &mut String) {
        push_ascii(out, &Civil::of(self).rfc3339());
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
        if let Some(ts) = parse_utc_fast(text) {
            return Ok(ts);
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

    /// `[from_ms, to_ms)` in epoch milliseconds; refuses an instant out of range, or
    /// `from_ms >= to_ms`.
    pub fn of_millis(from_ms: i64, to_ms: i64) -> Result<Self, TimeError> {
        TimeRange::new(
            Timestamp::from_millis(from_ms)?,
            Timestamp::from_millis(to_ms)?,
        )
    }

    /// `(from, to)` in epoch milliseconds.
    #[must_use]
    pub const fn as_millis(&self) -> (i64, i64) {
        (self.from.as_millis(), self.to.as_millis())
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
        let mut out = String::with_capacity(16);
        self.write_label(ts, &mut out);
        out
    }

    /// Appends [`Bucket::label`] of `ts` to `out`.
    pub fn write_label(self, ts: Timestamp, out: &mut String) {
        // Each label is a prefix of the RFC 3339 form: `YYYY-MM`, `YYYY-MM-DD`,
        // `YYYY-MM-DDTHH` and `YYYY-MM-DDTHH:MM`.
        let len = match self {
            Bucket::Month => 7,
            Bucket::Day => 10,
            Bucket::Hour => 13,
            Bucket::Minute => 16,
        };
        push_ascii(out, Civil::of(ts).rfc3339().get(..len).unwrap_or_default());
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

/// The common form `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`, parsed without chrono; `None` for
/// anything else (other offsets, leap seconds, lowercase separators...), which chrono
/// then parses or refuses. Accepts only what chrono accepts, with the same value.
fn parse_utc_fast(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    if b.len() < 20 || b.last() != Some(&b'Z') {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        digits.iter().try_fold(0i64, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
        })
    };
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if seps.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let milli = match b.len() - 1 - 19 {
        0 => 0,
        n @ 2..=10 if b[19] == b'.' => {
            let digits = num(20..20 + (n - 1))?;
            // Truncate to milliseconds, as timestamp_millis() does.
            let width = u32::try_from(n - 1).ok()?;
            if width >= 3 {
                digits / 10i64.pow(width - 3)
            } else {
                digits * 10i64.pow(3 - width)
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=month_days).contains(&day) {
        return None;
    }
    // Civil date to days (H. Hinnant's algorithm), eras of 400 years from 0000-03-01.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms =
        days * MS_PER_DAY + hour * MS_PER_HOUR + minute * MS_PER_MINUTE + second * 1000 + milli;
    Timestamp::from_millis(ms).ok()
}

/// Length of [`Timestamp::to_rfc3339`].
pub const RFC3339_LEN: usize = 24;

/// The UTC calendar fields of a timestamp (proleptic Gregorian, years 0..=9999).
struct Civil {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    milli: u32,
}

impl Civil {
    fn of(ts: Timestamp) -> Self {
        let days = ts.0.div_euclid(MS_PER_DAY);
        let in_day = ts.0.rem_euclid(MS_PER_DAY);
        // Days to civil date (H. Hinnant's algorithm), eras of 400 years from 0000-03-01.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        // Every field is in range by construction for MIN..=MAX (years 0..=9999).
        let field = |v: i64| u32::try_from(v).unwrap_or(0);
        Civil {
            year: field(year),
            month: field(month),
            day: field(day),
            hour: field(in_day / MS_PER_HOUR),
            minute: field(in_day % MS_PER_HOUR / MS_PER_MINUTE),
            second: field(in_day % MS_PER_MINUTE / 1000),
            milli: field(in_day % 1000),
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the RFC 3339 form (and every bucket label is a
    /// prefix of it), written into a fixed buffer: every ingested reading's timestamp
    /// is written twice, and a bucket label once.
    fn rfc3339(&self) -> [u8; RFC3339_LEN] {
        let mut text = *b"0000-00-00T00:00:00.000Z";
        for (range, value) in [
            (0..4, self.year),
            (5..7, self.month),
            (8..10, self.day),
            (11..13, self.hour),
            (14..16, self.minute),
            (17..19, self.second),
            (20..23, self.milli),
        ] {
            if let Some(slot) = text.get_mut(range) {
                put_digits(slot, value);
            }
        }
        text
    }
}

/// Appends ASCII text (digits and punctuation: always UTF-8).
fn push_ascii(out: &mut String, text: &[u8]) {
    out.push_str(std::str::from_utf8(text).unwrap_or_default());
}

/// The last `slot.len()` decimal digits of `v`, zero-padded, into `slot`, two at a time
/// from a table of "00" to "99" (every ingested reading's timestamp is written twice).
fn put_digits(slot: &mut [u8], mut v: u32) {
    const PAIRS: &[u8; 200] = b"00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
    for chunk in slot.rchunks_mut(2) {
        let at = usize::try_from(v % 100).unwrap_or(0) * 2;
        v /= 100;
        let pair = PAIRS.get(at..at + 2).unwrap_or(b"00");
        let skip = 2 - chunk.len();
        chunk.copy_from_slice(pair.get(skip..).unwrap_or_default());
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
    fn a_range_of_millis_is_refused_out_of_range_or_empty() {
        let r = TimeRange::of_millis(5, 9).expect("a range");
        assert_eq!(r.as_millis(), (5, 9));
        assert_eq!(
            r,
            TimeRange::new(Timestamp(5), Timestamp(9)).expect("a range")
        );
        assert!(matches!(
            TimeRange::of_millis(9, 9),
            Err(TimeError::EmptyRange { .. })
        ));
        assert!(TimeRange::of_millis(0, Timestamp::MAX.as_millis() + 1).is_err());
        assert!(TimeRange::of_millis(Timestamp::MIN.as_millis() - 1, 0).is_err());
    }

    #[test]
    fn bounds_format_with_fixed_width() {
        assert_eq!(Timestamp::MIN.to_rfc3339(), "0000-01-01T00:00:00.000Z");
        assert_eq!(Timestamp::MAX.to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert!(Timestamp::from_millis(Timestamp::MAX.as_millis() + 1).is_err());
        assert!(Timestamp::from_millis(Timestamp::MIN.as_millis() - 1).is_err());
    }

    /// The hand-written formatter against chrono's, over the whole range: both ends,
    /// every day boundary near leap years and centuries, and a spread of values.
    #[test]
    fn formatting_matches_chrono() {
        let chrono_rfc = |t: Timestamp| t.datetime().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        let chrono_label = |b: Bucket, t: Timestamp| {
            let pattern = match b {
                Bucket::Minute => "%Y-%m-%dT%H:%M",
                Bucket::Hour => "%Y-%m-%dT%H",
                Bucket::Day => "%Y-%m-%d",
                Bucket::Month => "%Y-%m",
            };
            t.datetime().format(pattern).to_string()
        };
        let mut samples = vec![Timestamp::MIN, Timestamp::MAX, Timestamp(0), Timestamp(-1)];
        for year_start in [
            ts("0000-02-28T23:59:59.999Z"),
            ts("1900-02-28T00:00:00Z"),
            ts("1969-12-31T00:00:00Z"),
            ts("2000-02-28T00:00:00Z"),
            ts("2024-02-28T00:00:00Z"),
            ts("2100-02-27T00:00:00Z"),
            ts("9999-12-30T00:00:00Z"),
        ] {
            for d in 0..400 {
                samples.push(year_start.offset_clamped(d * MS_PER_DAY - 1));
                samples.push(year_start.offset_clamped(d * MS_PER_DAY + 37_001));
            }
        }
        let span = Timestamp::MAX.0 - Timestamp::MIN.0;
        let mut x: i64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            // xorshift: a deterministic spread over the whole range.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            samples.push(Timestamp(Timestamp::MIN.0 + x.rem_euclid(span + 1)));
        }
        for t in samples {
            assert_eq!(t.to_rfc3339(), chrono_rfc(t), "{}", t.0);
            for b in Bucket::ALL {
                assert_eq!(b.label(t), chrono_label(b, t), "{b} {}", t.0);
            }
        }
    }

    /// The fast path of `parse` against chrono: every string it accepts, chrono
    /// accepts with the same value; the rest falls through to chrono.
    #[test]
    fn parsing_matches_chrono() {
        let chrono_parse = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .ok()
                .and_then(|d| Timestamp::from_millis(d.timestamp_millis()).ok())
        };
        let mut inputs: Vec<String> = [
            "2026-06-22T01:00:00Z",
            "2026-06-22T01:00:00.1Z",
            "2026-06-22T01:00:00.12Z",
            "2026-06-22T01:00:00.123Z",
            "2026-06-22T01:00:00.123456789Z",
            "2026-06-22T01:00:00.1234567891Z",
            "2026-06-22T01:00:00.Z",
            "2026-06-22T01:00:60Z",
            "2026-06-22T24:00:00Z",
            "2026-06-22T23:60:00Z",
            "2026-02-29T00:00:00Z",
            "2024-02-29T00:00:00Z",
            "2000-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-01-00T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "1969-12-31T23:59:59.999Z",
            "2026-06-22t01:00:00z",
            "2026-06-22 01:00:00Z",
            "2026-06-22T01:00:00+02:00",
            "2026-06-22T01:00:00",
            "2026-6-22T01:00:00Z",
            "2026-06-22T01:00:0aZ",
            "+2026-06-22T01:00:00Z",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let span = Timestamp::MAX.0 - Timestamp::MIN.0;
        let mut x: i64 = 0x1234_5678_9abc_def1;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = Timestamp(Timestamp::MIN.0 + x.rem_euclid(span + 1));
            let text = t.to_rfc3339();
            inputs.push(text.replace(".000Z", "Z"));
            inputs.push(text.replace('Z', "4567Z"));
            inputs.push(text.clone());
        }
        for input in inputs {
            if let Some(fast) = parse_utc_fast(&input) {
                assert_eq!(Some(fast), chrono_parse(&input), "{input}");
            }
            assert_eq!(
                Timestamp::parse(&input).ok(),
                chrono_parse(input.trim()),
                "{input}"
            );
        }
        assert!(parse_utc_fast("2026-06-22T01:00:00.123Z").is_some());
    }

    #[test]
    fn month_of_december_ends_at_new_year() {
        let t = ts("2026-12-31T23:59:59.999Z");
        assert_eq!(Bucket::Month.next_start(t), ts("2027-01-01T00:00:00Z"));
        assert_eq!(Bucket::Month.next_start(Timestamp::MAX), Timestamp::MAX);
    }
}
