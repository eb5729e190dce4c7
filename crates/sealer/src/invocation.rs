//! What one invocation of the sealer Lambda is asked, and its answer: the scheduled
//! run, or a rebuild of a range of hours (`{"reseal": {"from": .., "to": ..}}`).

use std::time::{Duration, Instant};

use serde::Deserialize;
use sharding::time::{BoundError, Timestamp, bound_of_millis, parse_bound};
use store::clock::ClockError;

use crate::{DynamoSealer, RunReport, SealError};

/// Taken off the invocation's deadline: no hour is started after it.
const DEADLINE_MARGIN: Duration = Duration::from_secs(20);

/// Why an invocation failed.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("{0}")]
    Event(String),
    #[error(transparent)]
    Reseal(#[from] ResealError),
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error(transparent)]
    Clock(#[from] ClockError),
}

/// One invocation with `event`, until the invocation's `deadline_ms` less a margin: a
/// scheduled event is a run; `{"reseal": ..}` a rebuild ([`crate::Sealer::rebuild`]),
/// or refused when malformed. Prints the run's figures as one EMF line (and the
/// layout's when a layout it cannot seal stops the run).
pub async fn invoke(
    sealer: &DynamoSealer,
    event: serde_json::Value,
    deadline_ms: u64,
) -> Result<RunReport, InvokeError> {
    let left = store::clock::time_left_now(deadline_ms)?.saturating_sub(DEADLINE_MARGIN);
    let now = store::clock::wall_clock()?;
    let deadline = Some(Instant::now() + left);
    let asked = Invocation::of(event).map_err(InvokeError::Event)?;
    let report = match asked.reseal {
        Some(reseal) => {
            let (from, to) = reseal.range()?;
            sealer
                .rebuild(from, to, now, deadline, |_, _| {})
                .await?
                .report
        }
        None => sealer.run(now, deadline).await.inspect_err(|e| {
            if let SealError::Layout(_) = e {
                println!("{}", crate::layout::metrics_line(now));
            }
        })?,
    };
    println!("{}", crate::metrics_line(&report, now));
    Ok(report)
}

/// What one invocation is asked: the scheduled run (any event EventBridge sends), or a
/// rebuild of a range of hours from the readings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Invocation {
    #[serde(default)]
    pub reseal: Option<Reseal>,
}

impl Invocation {
    /// What `event` asks: a rebuild when it names `reseal`, which must then be well
    /// formed (a malformed one is refused naming why, never run as the schedule's run),
    /// else the scheduled run (EventBridge's event names no `reseal`).
    pub fn of(event: serde_json::Value) -> Result<Self, String> {
        match event.get("reseal") {
            None => Ok(Self::default()),
            Some(serde_json::Value::Null) => {
                Err("a reseal event that names no range: reseal is null".to_owned())
            }
            Some(_) => serde_json::from_value(event)
                .map_err(|e| format!("a reseal event that cannot be read: {e}")),
        }
    }
}

/// `{"reseal": {"from": .., "to": ..}}`: hours to seal again, RFC 3339 or epoch ms.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reseal {
    pub from: serde_json::Value,
    pub to: serde_json::Value,
}

/// Why a `reseal` event's range cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResealError {
    /// A bound that is not a time (`sharding::time::parse_bound`'s rule).
    #[error("reseal.{name}: {value} is not RFC 3339 or epoch ms ({why})")]
    Bound {
        name: &'static str,
        value: String,
        why: BoundError,
    },
    #[error("reseal: from ({from}) is not before to ({to})")]
    Empty { from: i64, to: i64 },
}

impl Reseal {
    /// The range in epoch ms, or why it cannot be read.
    pub fn range(&self) -> Result<(i64, i64), ResealError> {
        let at = |v: &serde_json::Value, name: &'static str| {
            let ms = match v {
                serde_json::Value::Number(n) => n
                    .as_i64()
                    .map_or(Err(BoundError::Unparsable), bound_of_millis),
                serde_json::Value::String(t) => parse_bound(t),
                _ => Err(BoundError::Unparsable),
            };
            ms.map(Timestamp::as_millis)
                .map_err(|why| ResealError::Bound {
                    name,
                    value: v.to_string(),
                    why,
                })
        };
        let (from, to) = (at(&self.from, "from")?, at(&self.to, "to")?);
        if from >= to {
            return Err(ResealError::Empty { from, to });
        }
        Ok((from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_reseal_is_refused_and_a_scheduled_event_is_a_run() {
        let scheduled = serde_json::json!({
            "version": "0", "detail-type": "Scheduled Event", "source": "aws.events",
            "time": "2026-06-22T02:11:00Z", "detail": {}
        });
        assert_eq!(Invocation::of(scheduled), Ok(Invocation::default()));
        let asked = Invocation::of(serde_json::json!({"reseal": {"from": 0, "to": 3_600_000}}));
        assert!(asked.is_ok_and(|i| i.reseal.is_some()));
        for bad in [
            serde_json::json!({"reseal": {"from": 0}}),
            serde_json::json!({"reseal": "yesterday"}),
            serde_json::json!({"reseal": null}),
        ] {
            let refused = Invocation::of(bad.clone());
            assert!(
                refused.as_ref().is_err_and(|e| e.contains("reseal")),
                "{bad}: {refused:?}"
            );
        }
    }
}
