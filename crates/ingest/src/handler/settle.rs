//! Stage 6, settle: each message's fate, final once made, from the outcomes of the
//! writes that hold its readings, its own, its group's or the batch's slabs'
//! ([`settle_batch`], by the policy of `crate::fate`). No I/O: the writes' outcomes in,
//! the fates out.

use std::collections::BTreeMap;

use store::Reading;

use super::stages::{Group, KeyedWrite, Message, Shared};
use crate::fate::{Fate, Held, Settled, settle};

/// Every message's fate, in the batch's order, from the writes that hold its readings
/// ([`settle`] over them): a group's write, or a slab, counts for each of its members
/// with the readings it holds of theirs, so a member is written when every write
/// holding one of its readings is, and splits off only its own unwritten readings.
/// Every member of a group that stopped as a whole (its packing or keying failed)
/// shares that fate.
pub(crate) fn settle_batch(
    messages: Vec<Message<KeyedWrite>>,
    slabs: Vec<Shared<KeyedWrite>>,
    rekey_rounds: usize,
) -> Vec<Settled> {
    // Each message's part of each slab.
    let mut in_slabs = by_member(slabs);
    // Each group's members' fates, by its carrier, settled where the carrier is.
    let mut groups: BTreeMap<usize, BTreeMap<usize, Settled>> = BTreeMap::new();
    messages
        .into_iter()
        .enumerate()
        .map(|(m, message)| {
            let settled = match message {
                Message::Stopped(stopped) => Some(settle(Err(stopped), rekey_rounds)),
                Message::Alone(writes) => {
                    let mut held: Vec<Held> = writes.into_iter().map(KeyedWrite::held).collect();
                    held.extend(in_slabs.remove(&m).unwrap_or_default());
                    Some(settle(Ok(held), rekey_rounds))
                }
                Message::Carries(group) => {
                    let mut members = settle_group(group, &mut in_slabs, rekey_rounds);
                    let own = members.remove(&m);
                    groups.insert(m, members);
                    own
                }
                Message::PackedWith { carrier } => groups
                    .get_mut(&carrier)
                    .and_then(|members| members.remove(&m)),
            };
            // A member always has a reading in some write of its group; were it not so,
            // it is redelivered, never taken as stored.
            settled.unwrap_or_else(|| {
                Settled::Final(Fate::Reported {
                    reason: "its readings were in no write".to_owned(),
                })
            })
        })
        .collect()
}

/// Each member's fate in `group`: the fate of the group's stop, or from its part of
/// each of the group's writes, and of the slabs (`in_slabs`, taken), that holds one of
/// its readings.
fn settle_group(
    group: Group<KeyedWrite>,
    in_slabs: &mut BTreeMap<usize, Vec<Held>>,
    rekey_rounds: usize,
) -> BTreeMap<usize, Settled> {
    match group.writes {
        Err(stopped) => {
            let fate = stopped.fate();
            group
                .members
                .into_iter()
                .map(|member| (member, Settled::Final(fate.clone())))
                .collect()
        }
        Ok(shared) => {
            let mut held = by_member(shared);
            for member in group.members {
                if let Some(slabs) = in_slabs.remove(&member) {
                    held.entry(member).or_default().extend(slabs);
                }
            }
            held.into_iter()
                .map(|(member, held)| (member, settle(Ok(held), rekey_rounds)))
                .collect()
        }
    }
}

impl KeyedWrite {
    /// The write as its message holds it: all its readings, and its outcome.
    fn held(self) -> Held {
        Held {
            readings: self.readings,
            outcome: self.outcome,
        }
    }
}

/// Shared writes (a group's, or the batch's slabs), split by the member each reading
/// came from: each member's part of each write that holds one of its readings, with the
/// write's outcome.
fn by_member(shared: Vec<Shared<KeyedWrite>>) -> BTreeMap<usize, Vec<Held>> {
    let mut views: BTreeMap<usize, Vec<Held>> = BTreeMap::new();
    for Shared {
        write,
        member_messages,
    } in shared
    {
        let mut members: BTreeMap<usize, Vec<Reading>> = BTreeMap::new();
        for (reading, member) in write.readings.into_iter().zip(&member_messages) {
            members.entry(*member as usize).or_default().push(reading);
        }
        for (member, readings) in members {
            views.entry(member).or_default().push(Held {
                readings,
                outcome: write.outcome.clone(),
            });
        }
    }
    views
}

#[cfg(test)]
mod tests {
    use sharding::key::ItemKey;
    use store::batch::Outcome;

    use super::*;
    use crate::fate::tests::{reading, reported, throttled};
    use crate::fate::{Retry, Stopped};
    use crate::message::Refusal;

    fn keyed(event: &str, outcome: Option<Outcome>) -> KeyedWrite {
        KeyedWrite {
            readings: vec![reading(event)],
            slab: None,
            key: ItemKey {
                pk: "p".to_owned(),
                sk: event.to_owned(),
            },
            item: None,
            fanout: 1,
            outcome,
        }
    }

    /// The group of `members`, carried by the first, with these writes.
    fn group(
        members: &[usize],
        writes: Result<Vec<Shared<KeyedWrite>>, Stopped>,
    ) -> Message<KeyedWrite> {
        Message::Carries(Group {
            members: members.to_vec(),
            writes,
        })
    }

    /// A block holding `events`, each from the message of the same place in `from`.
    fn shared(events: &[&str], from: &[u32], outcome: Option<Outcome>) -> Shared<KeyedWrite> {
        Shared {
            write: KeyedWrite {
                readings: events.iter().map(|e| reading(e)).collect(),
                ..keyed(events[0], outcome)
            },
            member_messages: from.to_vec(),
        }
    }

    #[test]
    fn a_message_sharing_writes_follows_each_write_that_holds_its_readings() {
        // Messages 0, 1 and 2 of one device, grouped into the writes message 0 carries:
        // message 0's readings are all in the written block, message 1's in both
        // blocks, message 2's only in the throttled one.
        let messages = vec![
            group(
                &[0, 1, 2],
                Ok(vec![
                    shared(&["a", "b", "c"], &[0, 1, 0], Some(Outcome::Written)),
                    shared(&["d", "e"], &[1, 2], Some(throttled())),
                ]),
            ),
            Message::PackedWith { carrier: 0 },
            Message::PackedWith { carrier: 0 },
        ];
        let settled = settle_batch(messages, Vec::new(), 4);
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
    fn a_member_of_a_group_refused_or_retried_as_a_whole_shares_its_fate() {
        let refused = Refusal {
            field: "body".to_owned(),
            rule: "over 400 KB".to_owned(),
        };
        let settled = settle_batch(
            vec![
                group(&[0, 3], Err(Stopped::Refused(refused.clone()))),
                group(
                    &[1, 2],
                    Err(Stopped::Retry(Retry::Failed(
                        "metadata unavailable".to_owned(),
                    ))),
                ),
                Message::PackedWith { carrier: 1 },
                Message::PackedWith { carrier: 0 },
                Message::Alone(vec![keyed("z", Some(Outcome::Written))]),
            ],
            Vec::new(),
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
        // A member that no write holds is redelivered, never taken as stored.
        let lost = settle_batch(
            vec![
                group(&[0, 1], Ok(Vec::new())),
                Message::PackedWith { carrier: 0 },
            ],
            Vec::new(),
            4,
        );
        assert_eq!(lost[1], reported("its readings were in no write"));
    }

    #[test]
    fn a_slab_counts_for_each_message_it_holds_readings_of_and_only_those() {
        // Message 0 alone, 1 and 2 a group, 3 alone: slab A (written) holds readings
        // of 0 and 1, slab B (throttled) of 1 and 3; group {1, 2} lost every write of
        // its own to the slabs but 2's block.
        let messages = vec![
            Message::Alone(vec![keyed("own-0", Some(Outcome::Written))]),
            group(
                &[1, 2],
                Ok(vec![shared(&["g-2"], &[2], Some(Outcome::Written))]),
            ),
            Message::PackedWith { carrier: 1 },
            Message::Alone(Vec::new()),
        ];
        let slabs = vec![
            shared(&["a-0", "a-1"], &[0, 1], Some(Outcome::Written)),
            shared(&["b-1", "b-3"], &[1, 3], Some(throttled())),
        ];
        assert_eq!(
            settle_batch(messages, slabs, 4),
            vec![
                Settled::Final(Fate::Written { readings: 2 }),
                Settled::Split {
                    unwritten: vec![reading("b-1")],
                    written: 1,
                    reason: "throttled".to_owned(),
                },
                Settled::Final(Fate::Written { readings: 1 }),
                reported("throttled"),
            ]
        );
    }
}
