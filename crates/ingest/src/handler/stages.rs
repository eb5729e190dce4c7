//! What each stage gives the next, one message of the batch at a time, in the batch's
//! order: `parse` gives `pack` a [`ParsedMessage`], `pack` gives the keying a
//! [`PackedMessage`], the keying gives the writer a [`KeyedMessage`], and the writer
//! gives `settle` the same, each write with its outcome ([`settle_batch`]).
//!
//! One device's messages of a batch may be packed together into one [`Group`]: the
//! group owns its members and its writes, and travels with its first member, which
//! carries it (`Carries`); every other member names that carrier (`PackedWith`). Each
//! shared write names the message each of its readings came from ([`Shared`]).

use std::collections::BTreeMap;

use sharding::key::ItemKey;
use store::Reading;
use store::batch::{Outcome, SizedItem};
use store::item::Encoded;

use crate::fate::{Fate, Held, Settled, Stopped, settle};

/// A message as `parse` gives it: its readings, or why it stopped.
pub(crate) type ParsedMessage = Result<Vec<Reading>, Stopped>;

/// A message as `pack` gives it to the keying.
#[derive(Debug)]
pub(crate) enum PackedMessage {
    /// Parsed and not packed: the layout packs no blocks, or was not read. The keying
    /// packs its readings alone.
    Unpacked(Vec<Reading>),
    /// Packed alone into writes whose items are encoded before they are keyed (the
    /// rate is measured by those items' sizes).
    Alone(Vec<UnkeyedWrite>),
    /// The first member of a group of one device's messages: it carries the group.
    Carries(Group<UnkeyedWrite>),
    /// A member of the group carried by the message at `carrier`: its readings travel
    /// in that group's writes.
    PackedWith {
        /// The index in the batch of the message carrying the group.
        carrier: usize,
    },
    /// Stopped before its writes.
    Stopped(Stopped),
}

/// A message as the keying gives it to the writer, and the writer, each write with its
/// outcome, to `settle`.
#[derive(Debug)]
pub(crate) enum KeyedMessage {
    /// Its own writes.
    Alone(Vec<KeyedWrite>),
    /// The first member of a group: it carries the group.
    Carries(Group<KeyedWrite>),
    /// A member of the group carried by the message at `carrier`.
    PackedWith {
        /// The index in the batch of the message carrying the group.
        carrier: usize,
    },
    /// Stopped before its writes.
    Stopped(Stopped),
}

/// One device's messages packed together: their writes, shared.
#[derive(Debug)]
pub(crate) struct Group<W> {
    /// Its members, by index in the batch, in order: the carrier first.
    pub(crate) members: Vec<usize>,
    /// Its writes, or why the group stopped as a whole (its packing or its keying
    /// failed), which every member shares.
    pub(crate) writes: Result<Vec<Shared<W>>, Stopped>,
}

/// A write of a group, and the member message each of its readings came from.
#[derive(Debug)]
pub(crate) struct Shared<W> {
    pub(crate) write: W,
    /// The message (its index in the batch) of each reading of `write`, in order.
    pub(crate) member_messages: Vec<u32>,
}

/// One write before it is keyed (`store::pack`): its members, where a refusal finds
/// it in the message, and its item encoded under a placeholder key
/// (`store::pack::encode_unkeyed`) when the pack stage encoded it.
#[derive(Debug)]
pub(crate) struct UnkeyedWrite {
    /// The readings its item holds, in order of `(ts, event id)`.
    pub(crate) readings: Vec<Reading>,
    /// Its first member's place among its message's readings, when the message has
    /// several (a refusal names `readings[i]`); none in a group's write.
    pub(crate) index: Option<usize>,
    /// Its item under a placeholder key as long as any key it can get.
    pub(crate) item: Option<Encoded>,
}

/// One write on its way to the table: a reading's own item, or a block of readings
/// (`store::pack`), keyed by its first member.
#[derive(Debug)]
pub(crate) struct KeyedWrite {
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
}

impl PackedMessage {
    /// Whether the keying has writes or readings of this message to key.
    pub(crate) fn to_key(&self) -> bool {
        matches!(
            self,
            Self::Unpacked(_) | Self::Alone(_) | Self::Carries(Group { writes: Ok(_), .. })
        )
    }

    /// The readings the keying keys with this message: its own, or its group's when it
    /// carries one (none of any other message).
    pub(crate) fn readings(&self) -> impl Iterator<Item = &Reading> {
        let (unpacked, alone, shared): (&[Reading], &[UnkeyedWrite], &[Shared<UnkeyedWrite>]) =
            match self {
                Self::Unpacked(readings) => (readings, &[], &[]),
                Self::Alone(writes) => (&[], writes, &[]),
                Self::Carries(Group {
                    writes: Ok(shared), ..
                }) => (&[], &[], shared),
                _ => (&[], &[], &[]),
            };
        unpacked.iter().chain(
            alone
                .iter()
                .chain(shared.iter().map(|s| &s.write))
                .flat_map(|w| w.readings.iter()),
        )
    }
}

impl KeyedMessage {
    /// The writes this message holds: its own, and its group's when it carries one.
    fn parts(&self) -> (&[KeyedWrite], &[Shared<KeyedWrite>]) {
        match self {
            Self::Alone(writes) => (writes, &[]),
            Self::Carries(Group {
                writes: Ok(shared), ..
            }) => (&[], shared),
            _ => (&[], &[]),
        }
    }

    /// The writes this message holds: its own, or its group's when it carries one.
    fn writes(&self) -> impl Iterator<Item = &KeyedWrite> {
        let (alone, shared) = self.parts();
        alone.iter().chain(shared.iter().map(|s| &s.write))
    }

    /// The readings of the writes it holds that were written, each with the message
    /// it came from: `own` (this message's index in the batch) for its own writes, the
    /// member's for a write of the group it carries.
    pub(crate) fn written_readings(&self, own: usize) -> impl Iterator<Item = (usize, &Reading)> {
        let written = |w: &KeyedWrite| matches!(w.outcome, Some(Outcome::Written));
        let (alone, shared) = self.parts();
        let alone = alone
            .iter()
            .filter(move |w| written(w))
            .flat_map(move |w| w.readings.iter().map(move |r| (own, r)));
        let shared = shared
            .iter()
            .filter(move |s| written(&s.write))
            .flat_map(|s| {
                s.member_messages
                    .iter()
                    .zip(&s.write.readings)
                    .map(|(&member, r)| (member as usize, r))
            });
        alone.chain(shared)
    }

    /// The writes this message holds, to change.
    fn writes_mut(&mut self) -> impl Iterator<Item = &mut KeyedWrite> {
        let (alone, shared): (&mut [KeyedWrite], &mut [Shared<KeyedWrite>]) = match self {
            Self::Alone(writes) => (writes, &mut []),
            Self::Carries(Group {
                writes: Ok(shared), ..
            }) => (&mut [], shared),
            _ => (&mut [], &mut []),
        };
        alone
            .iter_mut()
            .chain(shared.iter_mut().map(|s| &mut s.write))
    }

    /// Whether it, or the group it carries, stopped on a panic.
    pub(crate) fn panicked(&self) -> bool {
        match self {
            Self::Stopped(stopped)
            | Self::Carries(Group {
                writes: Err(stopped),
                ..
            }) => stopped.is_panic(),
            _ => false,
        }
    }
}

/// Every write of `messages`, in the batch's order (a group's where its carrier is).
pub(crate) fn writes(messages: &[KeyedMessage]) -> impl Iterator<Item = &KeyedWrite> {
    messages.iter().flat_map(KeyedMessage::writes)
}

/// Every write of `messages`, to change, in the batch's order.
pub(crate) fn writes_mut(messages: &mut [KeyedMessage]) -> impl Iterator<Item = &mut KeyedWrite> {
    messages.iter_mut().flat_map(KeyedMessage::writes_mut)
}

/// Every message's fate, in the batch's order, from the writes that hold its readings
/// ([`settle`] over them): a group's write counts for each of its members with the
/// readings it holds of theirs, so a member is written when every write holding one of
/// its readings is, and splits off only its own unwritten readings. Every member of a
/// group that stopped as a whole (its packing or keying failed) shares that fate.
pub(crate) fn settle_batch(messages: Vec<KeyedMessage>, rekey_rounds: usize) -> Vec<Settled> {
    // Each group's members' fates, by its carrier, settled where the carrier is.
    let mut groups: BTreeMap<usize, BTreeMap<usize, Settled>> = BTreeMap::new();
    messages
        .into_iter()
        .enumerate()
        .map(|(m, message)| {
            let settled = match message {
                KeyedMessage::Stopped(stopped) => Some(settle(Err(stopped), rekey_rounds)),
                KeyedMessage::Alone(writes) => {
                    let held = writes.into_iter().map(KeyedWrite::held).collect();
                    Some(settle(Ok(held), rekey_rounds))
                }
                KeyedMessage::Carries(group) => {
                    let mut members = settle_group(group, rekey_rounds);
                    let own = members.remove(&m);
                    groups.insert(m, members);
                    own
                }
                KeyedMessage::PackedWith { carrier } => groups
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
/// each of the group's writes that holds one of its readings.
fn settle_group(group: Group<KeyedWrite>, rekey_rounds: usize) -> BTreeMap<usize, Settled> {
    match group.writes {
        Err(stopped) => {
            let fate = stopped.fate();
            group
                .members
                .into_iter()
                .map(|member| (member, Settled::Final(fate.clone())))
                .collect()
        }
        Ok(shared) => by_member(shared)
            .into_iter()
            .map(|(member, held)| (member, settle(Ok(held), rekey_rounds)))
            .collect(),
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

/// A group's writes, split by the member each reading came from: each member's part of
/// each write that holds one of its readings, with the write's outcome.
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

/// `packed` in two waves, where the first holds the messages up to the first whose
/// readings to key bring the count to `readings`, and the rest holds more to key:
/// `None` for the rest when it would hold nothing to key (all is then the first wave).
pub(crate) fn waves(
    mut packed: Vec<PackedMessage>,
    readings: usize,
) -> (Vec<PackedMessage>, Option<Vec<PackedMessage>>) {
    let mut count = 0;
    let mut split = packed.len();
    for (i, message) in packed.iter().enumerate() {
        if message.to_key() {
            count += message.readings().count();
            if count >= readings {
                split = i + 1;
                break;
            }
        }
    }
    if !packed
        .get(split..)
        .unwrap_or_default()
        .iter()
        .any(PackedMessage::to_key)
    {
        return (packed, None);
    }
    let rest = packed.split_off(split);
    (packed, Some(rest))
}

#[cfg(test)]
mod tests {
    use store::ThrottleKind;

    use super::*;
    use crate::fate::Retry;
    use crate::fate::tests::reading;
    use crate::message::Refusal;

    fn keyed(event: &str, outcome: Option<Outcome>) -> KeyedWrite {
        KeyedWrite {
            readings: vec![reading(event)],
            key: ItemKey {
                pk: "p".to_owned(),
                sk: event.to_owned(),
            },
            item: None,
            fanout: 1,
            outcome,
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

    /// The group of `members`, carried by the first, with these writes.
    fn group(members: &[usize], writes: Result<Vec<Shared<KeyedWrite>>, Stopped>) -> KeyedMessage {
        KeyedMessage::Carries(Group {
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
            KeyedMessage::PackedWith { carrier: 0 },
            KeyedMessage::PackedWith { carrier: 0 },
        ];
        let settled = settle_batch(messages, 4);
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
                KeyedMessage::PackedWith { carrier: 1 },
                KeyedMessage::PackedWith { carrier: 0 },
                KeyedMessage::Alone(vec![keyed("z", Some(Outcome::Written))]),
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
        // A member that no write holds is redelivered, never taken as stored.
        let lost = settle_batch(
            vec![
                group(&[0, 1], Ok(Vec::new())),
                KeyedMessage::PackedWith { carrier: 0 },
            ],
            4,
        );
        assert_eq!(lost[1], reported("its readings were in no write"));
    }
}
