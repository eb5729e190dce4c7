//! What a partition key says about itself: the time bucket it is written for, and
//! its pattern (time buckets and digit runs replaced), which groups keys of one kind.

use serde::Serialize;

/// A time bucket recognised in a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeBucket {
    /// `YYYY-MM-DDTHH:MM`
    Minute,
    /// `YYYY-MM-DDTHH`
    Hour,
    /// `YYYY-MM-DD`
    Day,
    /// `YYYY-MM`
    Month,
}

impl TimeBucket {
    /// How long a key of this bucket receives writes, seconds.
    pub fn secs(self) -> f64 {
        match self {
            TimeBucket::Minute => 60.0,
            TimeBucket::Hour => 3_600.0,
            TimeBucket::Day => 86_400.0,
            TimeBucket::Month => 31.0 * 86_400.0,
        }
    }

    fn placeholder(self) -> &'static str {
        match self {
            TimeBucket::Minute => "{minute}",
            TimeBucket::Hour => "{hour}",
            TimeBucket::Day => "{day}",
            TimeBucket::Month => "{month}",
        }
    }

    /// The bucket a key segment spells, if any.
    pub fn of_segment(segment: &str) -> Option<Self> {
        let shape: String = segment
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        match shape.as_str() {
            "9999-99-99T99:99" => Some(TimeBucket::Minute),
            "9999-99-99T99" => Some(TimeBucket::Hour),
            "9999-99-99" => Some(TimeBucket::Day),
            "9999-99" => Some(TimeBucket::Month),
            _ => None,
        }
    }

    /// The time bucket of a key: its last `#` segment that spells one.
    pub fn of_key(pk: &str) -> Option<Self> {
        pk.rsplit('#').find_map(Self::of_segment)
    }
}

/// The pattern of a key: time buckets and digit runs replaced, so `OPS_LOG#2026-06-22`
/// and `OPS_LOG#2026-06-23` share `OPS_LOG#{day}`, `dev-00042` is `dev-N`.
pub fn key_pattern(pk: &str) -> String {
    pk.split('#')
        .map(|segment| match TimeBucket::of_segment(segment) {
            Some(bucket) => bucket.placeholder().to_owned(),
            None => {
                let mut out = String::new();
                let mut in_digits = false;
                for c in segment.chars() {
                    if c.is_ascii_digit() {
                        if !in_digits {
                            out.push('N');
                        }
                        in_digits = true;
                    } else {
                        out.push(c);
                        in_digits = false;
                    }
                }
                out
            }
        })
        .collect::<Vec<_>>()
        .join("#")
}
