//! The pure core of the handler's last stages: where a message stands between stages,
//! its fate from its readings' outcomes ([`settle`]), and what its receive history makes
//! of that fate ([`leave`]). No I/O, no clock, no randomness: the handler applies what
//! these decide, and the reasons are typed, so nothing downstream parses a string.

use std::collections::BTreeMap;
use std::fmt;

use sharding::key::ItemKey;
use store::Reading;
use store::batch::{Outcome, SizedItem};
use store::item::Encoded;

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

/// Where a message stands between stages.
#[derive(Debug)]
pub(crate) enum Stage {
    Parsed(Vec<Reading>),
    /// Parsed, and packed into writes whose items are encoded before they are keyed
    /// (where the layout packs blocks: the rate is measured by those items' sizes).
    Packed(Vec<Packed>),
    Keyed(Vec<Keyed>),
    /// Its readings travel in the writes of the message at this index, with that
    /// message's and others' of one device (grouped across the batch by the pack
    /// stage): its fate follows the writes that hold them ([`settle_batch`]).
    Joined(usize),
    Refused(Refusal),
    Retry(Retry),
}

impl Stage {
    /// Whether the message is parsed and not keyed yet.
    pub(crate) fn is_unkeyed(&self) -> bool {
        matches!(self, Self::Parsed(_) | Self::Packed(_))
    }

    /// The readings of a message parsed and not keyed yet (none of any other).
    pub(crate) fn unkeyed_readings(&self) -> impl Iterator<Item = &Reading> {
        let (parsed, packed): (&[Reading], &[Packed]) = match self {
            Self::Parsed(readings) => (readings, &[]),
            Self::Packed(writes) => (&[], writes),
            _ => (&[], &[]),
        };
        parsed
            .iter()
            .chain(packed.iter().flat_map(|w| w.readings.iter()))
    }
}

/// One write of a message before it is keyed (`store::pack`): its members, where a
/// refusal finds it in the message, and its item encoded under a placeholder key
/// (`store::pack::encode_unkeyed`) when the pack stage encoded it.
#[derive(Debug)]
pub(crate) struct Packed {
    /// The readings its item holds, in order of `(ts, event id)`.
    pub(crate) readings: Vec<Reading>,
    /// Its first member's place among the message's readings, when it has several
    /// (a refusal names `readings[i]`).
    pub(crate) index: Option<usize>,
    /// Its item under a placeholder key as long as any key it can get.
    pub(crate) item: Option<Encoded>,
    /// The message each member came from, by index in the batch, where the write is
    /// shared by several messages; empty when all are the carrying message's own.
    pub(crate) origins: Vec<u32>,
}

/// One write on its way to the table: a reading's own item, or a block of readings
/// (`store::pack`), keyed by its first member.
#[derive(Debug)]
pub(crate) struct Keyed {
    /// The readings its item holds, in order of `(ts, event id)`: one, or a block's
    /// members.
    pub(crate) readings: Vec<Reading>,
    /// Its item's key: its first member's write key, made with `fanout` (a block's
    /// sort key with the digest of its members).
    pub(crate) key: ItemKey,
    /// The item to write next under `key` (taken while a round writes it).
    pub(crate) item: Option<SizedItem>,
    /// The fan-out its key was made with.
    pub(crate) fanout: u32,
    /// Its outcome, once final (a stale item has none until it is written again).
    pub(crate) outcome: Option<Outcome>,
    /// The message each member came from ([`Packed::origins`]); empty when all are the
    /// carrying message's own.
    pub(crate) origins: Vec<u32>,
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

/// A message's fate from its writes' outcomes. Any write refused for good
/// dead-letters the message; otherwise any stored write splits off the readings of the
/// unwritten rest, and none stored reports the message for redelivery. A write with no
/// outcome went stale more often than `rekey_rounds` allowed.
pub(crate) fn settle(stage: Stage, rekey_rounds: usize) -> Settled {
    let keyed = match stage {
        Stage::Refused(reason) => return Settled::Final(Fate::DeadLettered { reason }),
        Stage::Retry(retry) => {
            return Settled::Final(Fate::Reported {
                reason: retry.to_string(),
            });
        }
        Stage::Parsed(_) | Stage::Packed(_) | Stage::Joined(_) => {
            return Settled::Final(Fate::Reported {
                reason: "not keyed".to_owned(),
            });
        }
        Stage::Keyed(keyed) => keyed,
    };
    let permanent = keyed.iter().find_map(|k| match &k.outcome {
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
    let retry = keyed.iter().find_map(|k| match &k.outcome {
        Some(Outcome::Written) => None,
        Some(Outcome::FailedRetryable { reason, .. }) => Some(reason.clone()),
        _ => Some(format!(
            "not written: its key went stale (fan-out raised) more often than \
             {rekey_rounds} rounds or the deadline allowed"
        )),
    });
    let readings = keyed.iter().map(|k| k.readings.len()).sum();
    let (written, unwritten): (Vec<Keyed>, Vec<Keyed>) = keyed
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

/// Every message's fate, in the batch's order, from the writes that hold its readings
/// ([`settle`] over them): a write shared by several messages (one device's readings
/// grouped across the batch) counts for each of them with its members from it, so a
/// message is written when every write holding one of its readings is, and splits off
/// only its own unwritten readings. A message joined to another that was refused or is
/// retried as a whole (the group's packing or keying failed) shares that fate.
pub(crate) fn settle_batch(stages: Vec<Stage>, rekey_rounds: usize) -> Vec<Settled> {
    let mut joined: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, stage) in stages.iter().enumerate() {
        if let Stage::Joined(carrier) = stage {
            joined.entry(*carrier).or_default().push(i);
        }
    }
    let mut settled: Vec<Option<Settled>> =
        std::iter::repeat_with(|| None).take(stages.len()).collect();
    for (i, stage) in stages.into_iter().enumerate() {
        match stage {
            Stage::Joined(_) => {}
            Stage::Keyed(keyed) => {
                for (origin, writes) in by_origin(i, keyed) {
                    if let Some(slot) = settled.get_mut(origin) {
                        *slot = Some(settle(Stage::Keyed(writes), rekey_rounds));
                    }
                }
            }
            stage => {
                let fate = settle(stage, rekey_rounds);
                if let Settled::Final(shared) = &fate {
                    for &j in joined.get(&i).into_iter().flatten() {
                        settled[j] = Some(Settled::Final(shared.clone()));
                    }
                }
                settled[i] = Some(fate);
            }
        }
    }
    settled
        .into_iter()
        .map(|s| {
            // A joined message always has a reading in some write; were it not so, it
            // is redelivered, never taken as stored.
            s.unwrap_or_else(|| {
                Settled::Final(Fate::Reported {
                    reason: "its readings were in no write".to_owned(),
                })
            })
        })
        .collect()
}

/// The writes of the message at `own`, split by the message each member came from:
/// each message's view holds its own members of each write, with the write's key and
/// outcome.
fn by_origin(own: usize, keyed: Vec<Keyed>) -> BTreeMap<usize, Vec<Keyed>> {
    let mut views: BTreeMap<usize, Vec<Keyed>> = BTreeMap::new();
    for write in keyed {
        if write.origins.is_empty() {
            views.entry(own).or_default().push(write);
            continue;
        }
        let mut members: BTreeMap<usize, Vec<Reading>> = BTreeMap::new();
        for (reading, origin) in write.readings.into_iter().zip(&write.origins) {
            members.entry(*origin as usize).or_default().push(reading);
        }
        for (origin, readings) in members {
            views.entry(origin).or_default().push(Keyed {
                readings,
                key: write.key.clone(),
                item: None,
                fanout: write.fanout,
                outcome: write.outcome.clone(),
                origins: Vec::new(),
            });
        }
    }
    views
}

/// A message's delivery history, from its SQS attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Receipt {
    /// `ApproximateReceiveCount`.
    pub(crate) receives: u32,
    /// How often it was requeued as a fresh copy before.
    pub(crate) requeues: u32,
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
    /// Only these readings (the rest of a split message is stored).
    Unwritten(Vec<Reading>),
    /// The original body.
    Whole,
}

/// What leaving the batch makes of a settled message.
#[derive(Debug, PartialEq)]
pub(crate) enum Leave {
    /// The fate stands.
    Stay(Fate),
    /// A fresh copy goes back to the queue with `requeues` in its attribute. Once the
    /// copy is sent, the message's fate is `sent`; until then (and if the send fails)
    /// it is reported with `reason`.
    Copy {
        body: CopyBody,
        requeues: u32,
        sent: Fate,
        reason: String,
    },
}

/// The last-receive decision: a split message's unwritten rest is requeued (progress
/// was made, so the copy keeps its requeue count); a message reported at its last
/// receive is requeued while requeues are left, then dead-lettered with its reason, so
/// the redrive never moves a message to the DLQ without one.
pub(crate) fn leave(settled: Settled, receipt: Receipt, policy: LeavePolicy) -> Leave {
    let Receipt { receives, requeues } = receipt;
    match settled {
        Settled::Split {
            unwritten,
            written,
            reason,
        } if policy.can_requeue => Leave::Copy {
            sent: Fate::Split {
                written,
                requeued: unwritten.len(),
                reason: reason.clone(),
            },
            body: CopyBody::Unwritten(unwritten),
            requeues,
            reason,
        },
        Settled::Split { reason, .. } => Leave::Stay(Fate::Reported { reason }),
        Settled::Final(Fate::Reported { reason }) if receives >= policy.max_receives => {
            if policy.can_requeue && policy.counts_copies && requeues < policy.max_requeues {
                Leave::Copy {
                    sent: Fate::Requeued {
                        reason: reason.clone(),
                    },
                    body: CopyBody::Whole,
                    requeues: requeues + 1,
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
        Settled::Final(fate) => Leave::Stay(fate),
    }
}

#[cfg(test)]
mod tests {
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

    fn reading(event: &str) -> Reading {
        Reading {
            device_id: "dev-1".to_owned(),
            event_id: event.to_owned(),
            ts: Timestamp::from_millis(1_782_086_400_000).expect("in range"),
            metrics: BTreeMap::from([(
                "t".to_owned(),
                store::Decimal::from_f64(1.0).expect("a number"),
            )]),
            tags: BTreeMap::new(),
        }
    }

    fn keyed(event: &str, outcome: Option<Outcome>) -> Keyed {
        Keyed {
            readings: vec![reading(event)],
            key: ItemKey {
                pk: "p".to_owned(),
                sk: event.to_owned(),
            },
            item: None,
            fanout: 1,
            outcome,
            origins: Vec::new(),
        }
    }

    fn throttled() -> Outcome {
        Outcome::FailedRetryable {
            reason: "throttled".to_owned(),
            throttle: Some(ThrottleKind::KeyRange),
        }
    }

    fn reported(reason: &str) -> Settled {
        Settled::Final(Fate::Reported {
            reason: reason.to_owned(),
        })
    }

    #[test]
    fn a_message_settles_by_its_readings_outcomes() {
        let all = settle(Stage::Keyed(vec![keyed("a", Some(Outcome::Written))]), 4);
        assert_eq!(all, Settled::Final(Fate::Written { readings: 1 }));
        let none = settle(Stage::Keyed(vec![keyed("a", Some(throttled()))]), 4);
        assert_eq!(none, reported("throttled"));
        let part = settle(
            Stage::Keyed(vec![
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
        let stale = settle(Stage::Keyed(vec![keyed("a", None)]), 4);
        assert!(
            matches!(stale, Settled::Final(Fate::Reported { reason }) if reason.contains("4 rounds"))
        );
    }

    #[test]
    fn a_message_of_blocks_splits_off_the_readings_of_its_unwritten_blocks_only() {
        let block = |events: &[&str], outcome| Keyed {
            readings: events.iter().map(|e| reading(e)).collect(),
            ..keyed(events[0], outcome)
        };
        let part = settle(
            Stage::Keyed(vec![
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
        let all = settle(
            Stage::Keyed(vec![block(&["a", "b"], Some(Outcome::Written))]),
            4,
        );
        assert_eq!(all, Settled::Final(Fate::Written { readings: 2 }));
    }

    #[test]
    fn one_reading_refused_for_good_dead_letters_the_message_with_its_rule() {
        let settled = settle(
            Stage::Keyed(vec![
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
            settle(Stage::Refused(refused.clone()), 4),
            Settled::Final(Fate::DeadLettered { reason: refused })
        );
    }

    /// A block holding `events`, each from the message of the same place in `from`.
    fn shared(events: &[&str], from: &[u32], outcome: Option<Outcome>) -> Keyed {
        Keyed {
            readings: events.iter().map(|e| reading(e)).collect(),
            origins: from.to_vec(),
            ..keyed(events[0], outcome)
        }
    }

    #[test]
    fn a_message_sharing_writes_follows_each_write_that_holds_its_readings() {
        // Messages 0, 1 and 2 of one device, grouped into the writes message 0 carries:
        // message 0's readings are all in the written block, message 1's in both
        // blocks, message 2's only in the throttled one.
        let stages = vec![
            Stage::Keyed(vec![
                shared(&["a", "b", "c"], &[0, 1, 0], Some(Outcome::Written)),
                shared(&["d", "e"], &[1, 2], Some(throttled())),
            ]),
            Stage::Joined(0),
            Stage::Joined(0),
        ];
        let settled = settle_batch(stages, 4);
        assert_eq!(
            settled,
            vec![
                Settled::Final(Fate::Written { readings: 2 }),
                Settled::Split {
                    unwritten: vec![reading("d")],
                    written: 1,
                    reason: "throttled".to_owned(),
                },
                reported("throttled"),
            ]
        );
    }

    #[test]
    fn a_message_joined_to_a_refused_or_retried_carrier_shares_its_fate() {
        let refused = Refusal {
            field: "body".to_owned(),
            rule: "over 400 KB".to_owned(),
        };
        let settled = settle_batch(
            vec![
                Stage::Refused(refused.clone()),
                Stage::Retry(Retry::Failed("metadata unavailable".to_owned())),
                Stage::Joined(1),
                Stage::Joined(0),
                Stage::Keyed(vec![keyed("z", Some(Outcome::Written))]),
            ],
            4,
        );
        let dead = || {
            Settled::Final(Fate::DeadLettered {
                reason: refused.clone(),
            })
        };
        assert_eq!(
            settled,
            vec![
                dead(),
                reported("metadata unavailable"),
                reported("metadata unavailable"),
                dead(),
                Settled::Final(Fate::Written { readings: 1 }),
            ]
        );
        // A joined message that no write holds is redelivered, never taken as stored.
        let lost = settle_batch(vec![Stage::Keyed(Vec::new()), Stage::Joined(0)], 4);
        assert_eq!(lost[1], reported("its readings were in no write"));
    }

    #[test]
    fn a_panic_is_reported_as_a_panic() {
        let settled = settle(Stage::Retry(Retry::Panic("boom".to_owned())), 4);
        assert_eq!(settled, reported("panic while processing: boom"));
    }

    #[test]
    fn before_the_last_receive_a_reported_message_stays_reported() {
        let receipt = Receipt {
            receives: 4,
            requeues: 0,
        };
        assert_eq!(
            leave(reported("throttled"), receipt, POLICY),
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
        };
        assert_eq!(
            leave(reported("throttled"), at(2), POLICY),
            Leave::Copy {
                body: CopyBody::Whole,
                requeues: 3,
                sent: Fate::Requeued {
                    reason: "throttled".to_owned()
                },
                reason: "throttled".to_owned(),
            }
        );
        let Leave::Stay(Fate::DeadLettered { reason }) =
            leave(reported("throttled"), at(3), POLICY)
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
            leave(reported("throttled"), at(0), without_queue),
            Leave::Stay(Fate::DeadLettered { .. })
        ));
        let without_identity = LeavePolicy {
            counts_copies: false,
            ..POLICY
        };
        assert!(matches!(
            leave(reported("throttled"), at(0), without_identity),
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
        };
        assert_eq!(
            leave(split(), receipt, POLICY),
            Leave::Copy {
                body: CopyBody::Unwritten(vec![reading("b")]),
                requeues: 1,
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
            leave(split(), receipt, without_queue),
            Leave::Stay(Fate::Reported {
                reason: "throttled".to_owned()
            })
        );
    }
}
