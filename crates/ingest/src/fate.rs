//! The pure core of the handler's last stages: why a message stops before its writes
//! ([`Stopped`]), its fate from its readings' outcomes ([`settle`]), and what its receive
//! history makes of that fate ([`leave`]). The stage types a message passes through
//! are the handler's (`crate::handler::stages`); this policy knows none of them. No
//! I/O, no clock, no randomness: the handler applies what these decide, and the
//! reasons are typed, so nothing downstream parses a string.

use std::fmt;

use store::Reading;
use store::batch::Outcome;

use crate::message::Refusal;

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// All its readings are stored.
    Written {
        /// How many readings.
        readings: usize,
    },
    /// Sent to the DLQ with this reason (the DLQ message carries its field and rule).
    DeadLettered {
        /// The field and the rule.
        reason: Refusal,
    },
    /// Reported in `batchItemFailures`.
    Reported {
        /// The last real error.
        reason: String,
    },
    /// Failed transiently at its last receive and sent back to the queue as a fresh
    /// copy (not reported, so the original is deleted).
    Requeued {
        /// The last real error.
        reason: String,
    },
    /// Part of its readings stored; the rest sent back to the queue as a fresh copy
    /// holding only them (not reported, so the original is deleted).
    Split {
        /// Readings stored.
        written: usize,
        /// Readings in the copy.
        requeued: usize,
        /// Why the rest was not stored.
        reason: String,
    },
    /// Its readings stored (`written` of them), but a late mark of some failed: the
    /// readings of those device-hours, and any unwritten rest, sent back to the queue as
    /// a fresh copy that carries the stored attribute, so they are written again under
    /// their keys and marked (not reported, so the original is deleted). A copy holding
    /// stored readings is never dead-lettered for running out of receives ([`leave`]).
    /// With no queue to send it to, at the last receive the message is deleted with
    /// `requeued` 0: its readings stay stored and the error is logged.
    Unmarked {
        /// Readings stored.
        written: usize,
        /// Readings in the copy.
        requeued: usize,
        /// Why the marks were not written.
        reason: String,
    },
}

/// Why a message is to be tried again as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retry {
    /// The handler panicked while processing it (the panic's message).
    Panic(String),
    /// Something it needs failed transiently (the last real error).
    Failed(String),
}

impl fmt::Display for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Panic(what) => write!(f, "panic while processing: {what}"),
            Self::Failed(reason) => f.write_str(reason),
        }
    }
}

/// Why a message leaves the pipeline before its writes: refused for good, or to be
/// tried again as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// Refused for good: dead-lettered with this reason.
    Refused(Refusal),
    /// Tried again as a whole: reported.
    Retry(Retry),
}

impl Stopped {
    /// The fate of a message stopped so.
    pub(crate) fn fate(self) -> Fate {
        match self {
            Self::Refused(reason) => Fate::DeadLettered { reason },
            Self::Retry(retry) => Fate::Reported {
                reason: retry.to_string(),
            },
        }
    }

    /// Whether it stopped on a panic.
    pub(crate) fn is_panic(&self) -> bool {
        matches!(self, Self::Retry(Retry::Panic(_)))
    }
}

/// One write's part in a message: the readings of the message it holds, and the
/// write's outcome, once final (none: its key went stale more often than allowed).
#[derive(Debug)]
pub(crate) struct Held {
    /// The message's readings in the write, in order of `(ts, event id)`.
    pub(crate) readings: Vec<Reading>,
    /// The write's outcome.
    pub(crate) outcome: Option<Outcome>,
}

/// What became of a message once its readings have outcomes.
#[derive(Debug, PartialEq)]
pub(crate) enum Settled {
    Final(Fate),
    /// Some readings stored, these not: to be requeued as a fresh copy.
    Split {
        unwritten: Vec<Reading>,
        written: usize,
        reason: String,
    },
}

/// A message's fate from the writes that hold its readings, or from why it stopped
/// before them. Any write refused for good dead-letters the message; otherwise any
/// stored write splits off the readings of the unwritten rest, and none stored reports
/// the message for redelivery. A write with no outcome went stale more often than
/// `rekey_rounds` allowed.
pub(crate) fn settle(message: Result<Vec<Held>, Stopped>, rekey_rounds: usize) -> Settled {
    let held = match message {
        Ok(held) => held,
        Err(stopped) => return Settled::Final(stopped.fate()),
    };
    let permanent = held.iter().find_map(|k| match &k.outcome {
        Some(Outcome::FailedPermanent { reason }) => Some(reason.clone()),
        _ => None,
    });
    if let Some(rule) = permanent {
        return Settled::Final(Fate::DeadLettered {
            reason: Refusal {
                field: "item".to_owned(),
                rule,
            },
        });
    }
    let retry = held.iter().find_map(|k| match &k.outcome {
        Some(Outcome::Written) => None,
        Some(Outcome::FailedRetryable { reason, .. }) => Some(reason.clone()),
        _ => Some(format!(
            "not written: its key went stale (fan-out raised) more often than \
             {rekey_rounds} rounds or the deadline allowed"
        )),
    });
    let readings = held.iter().map(|k| k.readings.len()).sum();
    let (written, unwritten): (Vec<Held>, Vec<Held>) = held
        .into_iter()
        .partition(|k| matches!(k.outcome, Some(Outcome::Written)));
    match retry {
        None => Settled::Final(Fate::Written { readings }),
        Some(reason) if written.is_empty() => Settled::Final(Fate::Reported { reason }),
        Some(reason) => Settled::Split {
            unwritten: unwritten.into_iter().flat_map(|k| k.readings).collect(),
            written: written.iter().map(|k| k.readings.len()).sum(),
            reason,
        },
    }
}

/// A message's delivery history, from its SQS attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Receipt {
    /// `ApproximateReceiveCount`.
    pub(crate) receives: u32,
    /// How often it was requeued as a fresh copy before.
    pub(crate) requeues: u32,
    /// Whether it is the ingest's copy of readings already stored once (a copy sent for
    /// their late marks, or a copy of such a copy).
    pub(crate) stored: bool,
}

/// The stored readings of one message whose late marks failed (the mark stage's
/// answer, beside its settled fate, which it does not change).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unmarked {
    /// The message's readings in the device-hours whose marks failed.
    pub(crate) readings: Vec<Reading>,
    /// The last real error.
    pub(crate) reason: String,
}

/// The queue's rules for messages that leave a batch unwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeavePolicy {
    /// Whether copies can be sent (the source queue's URL is configured).
    pub(crate) can_requeue: bool,
    /// Whether the ingest can tell its own copies (it knows its sender identity), so a
    /// copy's requeue count is read back and requeues end. Without it every message
    /// reads as never requeued, so a whole message is never requeued (that could go on
    /// for ever): it is dead-lettered at its last receive. A split still is: each copy
    /// holds fewer readings than the message before it.
    pub(crate) counts_copies: bool,
    /// The redrive's `maxReceiveCount`: the receive at which a message is requeued or
    /// dead-lettered rather than reported.
    pub(crate) max_receives: u32,
    /// How often one message may be requeued.
    pub(crate) max_requeues: u32,
}

/// What a fresh copy holds.
#[derive(Debug, PartialEq)]
pub(crate) enum CopyBody {
    /// Only these readings (the rest of a split message, the readings whose marks
    /// failed).
    Readings(Vec<Reading>),
    /// The original body.
    Whole,
}

/// What leaving the batch makes of a settled message.
#[derive(Debug, PartialEq)]
pub(crate) enum Leave {
    /// The fate stands.
    Stay(Fate),
    /// A fresh copy goes back to the queue with `requeues` in its attribute, and with
    /// `stored`, the attribute saying it holds stored readings; it waits as a message
    /// after receive `wait_after` would. Once the copy is sent, the message's fate is
    /// `sent`; until then (and if the send fails) it is reported with `reason`.
    Copy {
        body: CopyBody,
        requeues: u32,
        stored: bool,
        wait_after: u32,
        sent: Fate,
        reason: String,
    },
}

/// What leaving the batch makes of a settled message, `unmarked` its stored readings
/// whose late marks failed.
///
/// A message with unmarked readings is copied at once, on any receive: the copy holds
/// those readings (and a split message's unwritten rest), carries the stored attribute,
/// and waits longer with each copy (its wait is that of receive `receives + requeues`,
/// capped by the redelivery's cap and SQS's 15 minutes), so a mark failing for hours
/// costs a receive per cap. A copy holding stored readings is requeued at its last
/// receive however often it was before, never dead-lettered for running out of
/// receives: its readings can be written again (they were), so nothing but an outage
/// keeps it coming back, and its readings must reach their cells.
///
/// Otherwise: a split message's unwritten rest is requeued (progress was made, so the
/// copy keeps its requeue count); a message reported at its last receive is requeued
/// while requeues are left, then dead-lettered with its reason, so the redrive never
/// moves a message to the DLQ without one.
pub(crate) fn leave(
    settled: Settled,
    unmarked: Option<Unmarked>,
    receipt: Receipt,
    policy: LeavePolicy,
) -> Leave {
    let Receipt {
        receives,
        requeues,
        stored,
    } = receipt;
    let last = receives >= policy.max_receives;
    match (settled, unmarked) {
        (Settled::Final(Fate::Written { readings }), Some(unmarked)) => {
            again(readings, Vec::new(), unmarked, receipt, policy)
        }
        (
            Settled::Split {
                unwritten, written, ..
            },
            Some(unmarked),
        ) => again(written, unwritten, unmarked, receipt, policy),
        (
            Settled::Split {
                unwritten,
                written,
                reason,
            },
            _,
        ) if policy.can_requeue => Leave::Copy {
            sent: Fate::Split {
                written,
                requeued: unwritten.len(),
                reason: reason.clone(),
            },
            body: CopyBody::Readings(unwritten),
            requeues,
            stored,
            wait_after: receives,
            reason,
        },
        (Settled::Split { reason, .. }, _) => Leave::Stay(Fate::Reported { reason }),
        (Settled::Final(Fate::Reported { reason }), _) if last => {
            let may_requeue = stored || (policy.counts_copies && requeues < policy.max_requeues);
            if policy.can_requeue && may_requeue {
                Leave::Copy {
                    sent: Fate::Requeued {
                        reason: reason.clone(),
                    },
                    body: CopyBody::Whole,
                    requeues: requeues.saturating_add(1),
                    stored,
                    wait_after: receives,
                    reason,
                }
            } else {
                Leave::Stay(Fate::DeadLettered {
                    reason: Refusal {
                        field: "message".to_owned(),
                        rule: format!(
                            "still failing after {receives} receives and {requeues} requeues: {reason}"
                        ),
                    },
                })
            }
        }
        // A message refused for good stays refused, even with stored readings whose marks
        // failed: its letter, redriven once the cause is fixed, writes and marks them.
        (Settled::Final(fate), _) => Leave::Stay(fate),
    }
}

/// A message whose stored readings' marks failed: they (and `unwritten`) go back as a
/// copy holding stored readings. Without a queue it is reported while receives are
/// left, and deleted at the last one with its readings stored and the error logged: a
/// letter in the DLQ would say a stored reading was refused.
fn again(
    written: usize,
    mut unwritten: Vec<Reading>,
    unmarked: Unmarked,
    receipt: Receipt,
    policy: LeavePolicy,
) -> Leave {
    let reason = format!("late mark not written: {}", unmarked.reason);
    if policy.can_requeue {
        unwritten.extend(unmarked.readings);
        return Leave::Copy {
            sent: Fate::Unmarked {
                written,
                requeued: unwritten.len(),
                reason: reason.clone(),
            },
            body: CopyBody::Readings(unwritten),
            requeues: receipt.requeues.saturating_add(1),
            stored: true,
            wait_after: receipt.receives.saturating_add(receipt.requeues),
            reason,
        };
    }
    if receipt.receives >= policy.max_receives && unwritten.is_empty() {
        return Leave::Stay(Fate::Unmarked {
            written,
            requeued: 0,
            reason,
        });
    }
    Leave::Stay(Fate::Reported { reason })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use sharding::time::Timestamp;
    use store::ThrottleKind;

    use super::*;

    const POLICY: LeavePolicy = LeavePolicy {
        can_requeue: true,
        counts_copies: true,
        max_receives: 5,
        max_requeues: 3,
    };

    /// A reading of `dev-1` with event id `event` (the stage types' tests use it too).
    pub(crate) fn reading(event: &str) -> Reading {
        Reading {
            device_id: "dev-1".to_owned(),
            event_id: event.to_owned(),
            ts: Timestamp::from_millis(1_782_086_400_000).expect("in range"),
            metrics: BTreeMap::from([(
                "t".to_owned(),
                store::Decimal::from_f64(1.0).expect("a number"),
            )]),
            tags: BTreeMap::new(),
            written: store::WriteOrder::OLDEST,
        }
    }

    fn keyed(event: &str, outcome: Option<Outcome>) -> Held {
        Held {
            readings: vec![reading(event)],
            outcome,
        }
    }

    /// A key-range throttle's outcome (the settle stage's tests use it too).
    pub(crate) fn throttled() -> Outcome {
        Outcome::FailedRetryable {
            reason: "throttled".to_owned(),
            throttle: Some(ThrottleKind::KeyRange),
        }
    }

    /// A message settled as reported with `reason`.
    pub(crate) fn reported(reason: &str) -> Settled {
        Settled::Final(Fate::Reported {
            reason: reason.to_owned(),
        })
    }

    #[test]
    fn a_message_settles_by_its_readings_outcomes() {
        let all = settle(Ok(vec![keyed("a", Some(Outcome::Written))]), 4);
        assert_eq!(all, Settled::Final(Fate::Written { readings: 1 }));
        let none = settle(Ok(vec![keyed("a", Some(throttled()))]), 4);
        assert_eq!(none, reported("throttled"));
        let part = settle(
            Ok(vec![
                keyed("a", Some(Outcome::Written)),
                keyed("b", Some(throttled())),
            ]),
            4,
        );
        assert_eq!(
            part,
            Settled::Split {
                unwritten: vec![reading("b")],
                written: 1,
                reason: "throttled".to_owned(),
            }
        );
        let stale = settle(Ok(vec![keyed("a", None)]), 4);
        assert!(
            matches!(stale, Settled::Final(Fate::Reported { reason }) if reason.contains("4 rounds"))
        );
    }

    #[test]
    fn a_message_of_blocks_splits_off_the_readings_of_its_unwritten_blocks_only() {
        let block = |events: &[&str], outcome| Held {
            readings: events.iter().map(|e| reading(e)).collect(),
            ..keyed(events[0], outcome)
        };
        let part = settle(
            Ok(vec![
                block(&["a", "b", "c"], Some(Outcome::Written)),
                block(&["d", "e"], Some(throttled())),
                block(&["f"], Some(Outcome::Written)),
            ]),
            4,
        );
        assert_eq!(
            part,
            Settled::Split {
                unwritten: vec![reading("d"), reading("e")],
                written: 4,
                reason: "throttled".to_owned(),
            }
        );
        let all = settle(Ok(vec![block(&["a", "b"], Some(Outcome::Written))]), 4);
        assert_eq!(all, Settled::Final(Fate::Written { readings: 2 }));
    }

    #[test]
    fn one_reading_refused_for_good_dead_letters_the_message_with_its_rule() {
        let settled = settle(
            Ok(vec![
                keyed("a", Some(Outcome::Written)),
                keyed(
                    "b",
                    Some(Outcome::FailedPermanent {
                        reason: "over 400 KB".to_owned(),
                    }),
                ),
            ]),
            4,
        );
        let Settled::Final(Fate::DeadLettered { reason }) = settled else {
            panic!("dead-lettered: {settled:?}");
        };
        assert_eq!(
            (reason.field.as_str(), reason.rule.as_str()),
            ("item", "over 400 KB")
        );
        let refused = Refusal {
            field: "readings[2].ts".to_owned(),
            rule: "is not RFC 3339".to_owned(),
        };
        assert_eq!(
            settle(Err(Stopped::Refused(refused.clone())), 4),
            Settled::Final(Fate::DeadLettered { reason: refused })
        );
    }

    #[test]
    fn a_panic_is_reported_as_a_panic() {
        let settled = settle(Err(Stopped::Retry(Retry::Panic("boom".to_owned()))), 4);
        assert_eq!(settled, reported("panic while processing: boom"));
    }

    #[test]
    fn before_the_last_receive_a_reported_message_stays_reported() {
        let receipt = Receipt {
            receives: 4,
            requeues: 0,
            stored: false,
        };
        assert_eq!(
            leave(reported("throttled"), None, receipt, POLICY),
            Leave::Stay(Fate::Reported {
                reason: "throttled".to_owned()
            })
        );
    }

    #[test]
    fn at_the_last_receive_it_is_requeued_while_requeues_are_left_then_dead_lettered() {
        let at = |requeues| Receipt {
            receives: 5,
            requeues,
            stored: false,
        };
        assert_eq!(
            leave(reported("throttled"), None, at(2), POLICY),
            Leave::Copy {
                body: CopyBody::Whole,
                requeues: 3,
                stored: false,
                wait_after: 5,
                sent: Fate::Requeued {
                    reason: "throttled".to_owned()
                },
                reason: "throttled".to_owned(),
            }
        );
        let Leave::Stay(Fate::DeadLettered { reason }) =
            leave(reported("throttled"), None, at(3), POLICY)
        else {
            panic!("dead-lettered at the last requeue");
        };
        assert_eq!(reason.field, "message");
        assert_eq!(
            reason.rule,
            "still failing after 5 receives and 3 requeues: throttled"
        );
        let without_queue = LeavePolicy {
            can_requeue: false,
            ..POLICY
        };
        assert!(matches!(
            leave(reported("throttled"), None, at(0), without_queue),
            Leave::Stay(Fate::DeadLettered { .. })
        ));
        let without_identity = LeavePolicy {
            counts_copies: false,
            ..POLICY
        };
        assert!(matches!(
            leave(reported("throttled"), None, at(0), without_identity),
            Leave::Stay(Fate::DeadLettered { .. })
        ));
    }

    #[test]
    fn a_split_message_requeues_only_its_unwritten_rest_keeping_its_count() {
        let split = || Settled::Split {
            unwritten: vec![reading("b")],
            written: 2,
            reason: "throttled".to_owned(),
        };
        let receipt = Receipt {
            receives: 1,
            requeues: 1,
            stored: false,
        };
        assert_eq!(
            leave(split(), None, receipt, POLICY),
            Leave::Copy {
                body: CopyBody::Readings(vec![reading("b")]),
                requeues: 1,
                stored: false,
                wait_after: 1,
                sent: Fate::Split {
                    written: 2,
                    requeued: 1,
                    reason: "throttled".to_owned()
                },
                reason: "throttled".to_owned(),
            }
        );
        let without_queue = LeavePolicy {
            can_requeue: false,
            ..POLICY
        };
        assert_eq!(
            leave(split(), None, receipt, without_queue),
            Leave::Stay(Fate::Reported {
                reason: "throttled".to_owned()
            })
        );
    }

    fn unmarked(events: &[&str]) -> Option<Unmarked> {
        Some(Unmarked {
            readings: events.iter().map(|e| reading(e)).collect(),
            reason: "HTTP 500".to_owned(),
        })
    }

    fn written(readings: usize) -> Settled {
        Settled::Final(Fate::Written { readings })
    }

    #[test]
    fn stored_readings_whose_marks_failed_go_back_at_once_on_any_receive_never_to_the_dlq() {
        // The first receive, the last, and the last of a copy out of requeues.
        for (receives, requeues) in [(1, 0), (5, 0), (5, 3), (5, 40)] {
            let receipt = Receipt {
                receives,
                requeues,
                stored: requeues > 0,
            };
            assert_eq!(
                leave(written(2), unmarked(&["a"]), receipt, POLICY),
                Leave::Copy {
                    body: CopyBody::Readings(vec![reading("a")]),
                    requeues: requeues + 1,
                    stored: true,
                    wait_after: receives + requeues,
                    sent: Fate::Unmarked {
                        written: 2,
                        requeued: 1,
                        reason: "late mark not written: HTTP 500".to_owned(),
                    },
                    reason: "late mark not written: HTTP 500".to_owned(),
                },
                "receive {receives}, requeues {requeues}"
            );
        }
        // A split message's copy holds its unwritten rest and its unmarked readings.
        let split = Settled::Split {
            unwritten: vec![reading("b")],
            written: 1,
            reason: "throttled".to_owned(),
        };
        let receipt = Receipt {
            receives: 1,
            requeues: 0,
            stored: false,
        };
        let Leave::Copy { body, stored, .. } = leave(split, unmarked(&["a"]), receipt, POLICY)
        else {
            panic!("copied");
        };
        assert_eq!(body, CopyBody::Readings(vec![reading("b"), reading("a")]));
        assert!(stored);
    }

    #[test]
    fn a_copy_holding_stored_readings_is_requeued_when_receives_and_requeues_run_out() {
        let receipt = Receipt {
            receives: 5,
            requeues: 9,
            stored: true,
        };
        let Leave::Copy {
            body,
            requeues,
            stored,
            sent,
            ..
        } = leave(reported("throttled"), None, receipt, POLICY)
        else {
            panic!("requeued, not dead-lettered");
        };
        assert_eq!((body, requeues, stored), (CopyBody::Whole, 10, true));
        assert!(matches!(sent, Fate::Requeued { .. }));
        // Refused for good, it stays refused: its letter, redriven, writes and marks it.
        let refused = Settled::Final(Fate::DeadLettered {
            reason: Refusal {
                field: "item".to_owned(),
                rule: "over 400 KB".to_owned(),
            },
        });
        assert!(matches!(
            leave(refused, unmarked(&["a"]), receipt, POLICY),
            Leave::Stay(Fate::DeadLettered { .. })
        ));
    }

    #[test]
    fn without_a_queue_unmarked_readings_are_reported_then_kept_stored_never_dead_lettered() {
        let without_queue = LeavePolicy {
            can_requeue: false,
            ..POLICY
        };
        let at = |receives| Receipt {
            receives,
            requeues: 0,
            stored: false,
        };
        assert!(matches!(
            leave(written(1), unmarked(&["a"]), at(4), without_queue),
            Leave::Stay(Fate::Reported { .. })
        ));
        assert_eq!(
            leave(written(1), unmarked(&["a"]), at(5), without_queue),
            Leave::Stay(Fate::Unmarked {
                written: 1,
                requeued: 0,
                reason: "late mark not written: HTTP 500".to_owned(),
            })
        );
    }
}
