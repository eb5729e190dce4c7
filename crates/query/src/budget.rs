//! What one request may cost: Queries sent, items DynamoDB evaluates (ScannedCount,
//! which counts the items a filter rejects), answer bytes and wall time.
//!
//! A read stops before any of them would be exceeded ([`crate::exec::ReadBudget`]). A
//! route that pages then answers what it has, with a cursor from where the read stood
//! (every reading before it answered, none after it): no reading is lost or answered
//! twice. A read that stopped before answering anything, or a route that does not
//! page, is refused with 400 `budget_exceeded`, naming the budget and the way out.

use std::time::{Duration, Instant};

use crate::error::{ApiError, codes};
use crate::exec::{Exhausted, ReadBudget};
use crate::model::ReadingKey;

/// The configured budgets of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBudget {
    /// Query and GetItem calls (`QUERY_MAX_QUERIES`).
    pub queries: u64,
    /// Items DynamoDB evaluates (`QUERY_MAX_EVALUATED`).
    pub evaluated: u64,
    /// Bytes of a JSON answer (`QUERY_MAX_ANSWER_BYTES`): under Lambda's 6 MB response
    /// limit, with room for the headers and API Gateway's envelope.
    pub answer_bytes: usize,
    /// Taken off the invocation's deadline, to build and return the answer
    /// (`QUERY_DEADLINE_MARGIN_MS`).
    pub deadline_margin: Duration,
}

impl Default for RequestBudget {
    /// 2,000 Queries (a day over 64 shards reads 1,536 keys; a month of a device at
    /// fan-out 1 reads 744), 250,000 items evaluated (the readings a stats page may
    /// aggregate inside one bucket, plus a quarter), 4 MB of answer, and a 1-s margin.
    fn default() -> Self {
        Self {
            queries: 2_000,
            evaluated: sharding::read_plan::DEFAULT_MAX_EVALUATED,
            answer_bytes: 4_000_000,
            deadline_margin: Duration::from_secs(1),
        }
    }
}

impl RequestBudget {
    /// The read budget of a request that must be answered by `deadline`.
    pub fn read(&self, deadline: Option<Instant>) -> ReadBudget {
        ReadBudget {
            queries: self.queries,
            evaluated: self.evaluated,
            deadline,
        }
    }

    /// The instant a request must stop reading by, from the invocation's deadline:
    /// that deadline less the margin (at once when less than the margin is left).
    pub fn deadline_from(&self, remaining: Duration, now: Instant) -> Instant {
        now + remaining.saturating_sub(self.deadline_margin)
    }
}

/// What a refusal says about the way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// A shorter range reads less.
    NarrowRange,
    /// A read over every device without the time index evaluates whole buckets,
    /// whatever its range.
    TimeIndex,
    /// The newest reading lies further back than one request reads: a range read,
    /// newest first, of an older range finds it.
    OlderRange,
}

/// 400 `budget_exceeded`: the request could not answer anything within `budget`.
pub fn refusal(budget: Exhausted, limits: &RequestBudget, advice: Advice) -> ApiError {
    let spent = match budget {
        Exhausted::Queries => format!(
            "the read needs more than {} Queries (QUERY_MAX_QUERIES) before it can answer \
             anything (a device with a raised fan-out k reads k + 1 keys per time bucket)",
            limits.queries
        ),
        Exhausted::Evaluated => format!(
            "DynamoDB would evaluate more than {} items (QUERY_MAX_EVALUATED) before the \
             first reading of the answer",
            limits.evaluated
        ),
        Exhausted::Time => format!(
            "the read reached its time budget (the function's deadline less {} ms, \
             QUERY_DEADLINE_MARGIN_MS) before it could answer anything",
            limits.deadline_margin.as_millis()
        ),
    };
    let way_out = match advice {
        Advice::NarrowRange => "read a shorter range",
        Advice::TimeIndex => {
            "without the time index a read over every device evaluates every item of each \
             time bucket it touches, whatever its range: read one device, or deploy with \
             TimeIndex=enabled so that the range bounds what is evaluated"
        }
        Advice::OlderRange => {
            "the device's newest reading is older than what was read: read it with \
             GET /devices/{device_id}/readings?order=desc&limit=1 over an older range"
        }
    };
    ApiError::bad_request(codes::BUDGET_EXCEEDED, format!("{spent}; {way_out}"))
}

/// 400 `budget_exceeded` for an answer whose first item alone exceeds the byte budget.
pub fn too_large(limits: &RequestBudget) -> ApiError {
    ApiError::bad_request(
        codes::BUDGET_EXCEEDED,
        format!(
            "one reading alone exceeds the answer budget of {} bytes \
             (QUERY_MAX_ANSWER_BYTES); raise it",
            limits.answer_bytes
        ),
    )
}

/// Where a readings page that a budget ended resumes: after the last reading answered,
/// or, when the read had settled further (streams with nothing more before some time),
/// just before `settled_before`, whichever comes later in the page's order. Every
/// reading before the position was answered, none after it. `None` when that is no
/// further than `start`, the position the page started from: the page answered
/// nothing and a cursor would not move.
pub fn resume_position(
    last: Option<ReadingKey>,
    settled_before: i64,
    device: &str,
    descending: bool,
    start: &ReadingKey,
) -> Option<ReadingKey> {
    // No device or event id is empty, so (t, device, "") sorts before every reading
    // at t of that device (and, with an empty device, of every device).
    let settled = ReadingKey {
        ts_ms: if descending {
            settled_before.saturating_add(1)
        } else {
            settled_before
        },
        device_id: device.to_owned(),
        event_id: String::new(),
    };
    let further = |a: &ReadingKey, b: &ReadingKey| if descending { a < b } else { a > b };
    let position = match last {
        Some(last) if !further(&settled, &last) => last,
        _ => settled,
    };
    further(&position, start).then_some(position)
}

/// Where a readings page with no cursor starts: before every reading of the range, in
/// the page's order.
pub fn start_position(from_ms: i64, to_ms: i64, device: &str, descending: bool) -> ReadingKey {
    ReadingKey {
        ts_ms: if descending { to_ms } else { from_ms },
        device_id: device.to_owned(),
        event_id: String::new(),
    }
}

/// Bytes `value` takes as JSON.
pub fn json_len<T: serde::Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter fails only if `value` cannot serialize; the wire types
    // always can.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ts_ms: i64, device: &str, event: &str) -> ReadingKey {
        ReadingKey {
            ts_ms,
            device_id: device.into(),
            event_id: event.into(),
        }
    }

    #[test]
    fn a_settled_time_past_the_last_reading_moves_the_cursor_on() {
        let start = start_position(0, 100, "", false);
        let p = resume_position(Some(key(10, "d", "e")), 50, "", false, &start);
        assert_eq!(p, Some(key(50, "", "")));
        // Settled no further than the last reading: resume after the reading.
        let p = resume_position(Some(key(50, "d", "e")), 50, "", false, &start);
        assert_eq!(p, Some(key(50, "d", "e")));
        // Nothing answered and nothing settled: no cursor.
        assert_eq!(resume_position(None, 0, "", false, &start), None);
    }

    #[test]
    fn descending_positions_keep_every_reading_at_the_settled_time() {
        let start = start_position(0, 100, "d", true);
        let p = resume_position(None, 60, "d", true, &start).unwrap();
        assert_eq!(p, key(61, "d", ""));
        assert!(key(60, "d", "zzz") < p, "a reading at 60 is still to come");
        assert_eq!(resume_position(None, 99, "d", true, &start), None);
    }

    #[test]
    fn the_deadline_leaves_the_margin() {
        let budget = RequestBudget::default();
        let now = Instant::now();
        let d = budget.deadline_from(Duration::from_secs(10), now);
        assert_eq!(d - now, Duration::from_secs(9));
        assert_eq!(budget.deadline_from(Duration::from_millis(300), now), now);
    }
}
