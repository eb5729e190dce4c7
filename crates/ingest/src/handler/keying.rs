//! Stage 4: every parsed reading keyed. What the keying reads first, the layout and
//! each entity's fan-out in force now ([`KeyingState`], read by
//! `Ingest::load_keying` in `super::reads`), then each message's writes keyed by
//! [`key_batch`]: those the pack stage packed, with each item encoded before its key,
//! which is set here, or, where it did not pack them, its readings packed alone now
//! (`super::pack::alone`: blocks of one device's readings where the layout packs them,
//! else one item a reading). Each write's key is its first member's, from
//! `sharding::key::write_key` with the fan-out it was made under, and travels typed with
//! its item to the writer, which never reads a key out of an item. A slab's key is its
//! group's ([`slab_key`]). No I/O: the reads' answers in, the keyed writes out.

use std::collections::HashMap;
use std::time::Duration;

use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ItemKey, KeyError, ReadingRef, WriteKey, write_key};
use sharding::slab;
use sharding::time::Timestamp;
use store::batch::{ItemTooLarge, Outcome, SizedItem};
use store::{Encoded, Reading, StoreError, pack};
use tracing::Span;

use super::guarded;
use super::pack::{alone, check_keyable, key_refusal};
use super::stages::{
    Group, KeyedWrite, Message, Packed, Shared, SlabPlace, UnkeyedSlab, UnkeyedWrite,
};
use crate::fate::{Retry, Stopped};
use crate::message::Refusal;

/// Each entity's fan-out history, or why it could not be read.
pub(super) type Fanouts = HashMap<String, Result<FanoutHistory, StoreError>>;

/// What keying reads first: the layout and each entity's fan-out at `now`.
pub(super) struct Keying {
    pub(super) table: TableHistory,
    pub(super) fanouts: Fanouts,
    pub(super) now: Timestamp,
}

/// What the keying has to key the batch with.
pub(super) enum KeyingState {
    /// No message has writes or readings to key: nothing was read.
    NothingToKey,
    /// The layout and the fan-outs, read.
    Ready(Keying),
    /// The layout could not be read: every message to key is to be retried.
    Unavailable(Retry),
}

impl KeyingState {
    /// How many readings the first wave keys ([`Packed::waves`]): one call per writer
    /// slot of `calls` readings; none (one wave) when nothing is to be keyed.
    pub(super) fn first_wave(&self, calls: usize) -> Option<usize> {
        matches!(self, Self::Ready(_)).then_some(calls)
    }
}

/// A write's key, the fan-out it was made under, and its item.
pub(super) struct KeyedItem {
    pub(super) key: WriteKey,
    pub(super) item: SizedItem,
}

/// Why a write has no item.
#[derive(Debug, thiserror::Error)]
pub(super) enum ItemError {
    /// Its key cannot be made.
    #[error(transparent)]
    Key(KeyError),
    /// The item would break DynamoDB's size limit.
    #[error(transparent)]
    TooLarge(ItemTooLarge),
    /// Its members cannot be a block (`store::pack` makes none such).
    #[error("{0}")]
    Block(StoreError),
    /// It has no member (`store::pack` makes none such).
    #[error("a write of no reading")]
    Empty,
}

/// Stage 4: keys every message of `packed` that has writes or readings to key (whose
/// spans are `spans`), with `keying`, each item expiring after `retention`; when the
/// layout could not be read, each of them is to be retried.
pub(super) fn key_batch(
    packed: Packed,
    keying: &KeyingState,
    retention: Duration,
    spans: &[Span],
) -> Vec<Message<KeyedWrite>> {
    match packed {
        Packed::Unpacked(messages) => key_messages(messages, keying, retention, spans),
        Packed::Packed(messages) => key_messages(messages, keying, retention, spans),
    }
}

/// [`key_batch`] over the messages of one stage's writes.
fn key_messages<W: Cut>(
    messages: Vec<Message<W>>,
    keying: &KeyingState,
    retention: Duration,
    spans: &[Span],
) -> Vec<Message<KeyedWrite>> {
    messages
        .into_iter()
        .zip(spans)
        .map(|(message, span)| match keying {
            KeyingState::Ready(keying) => {
                span.in_scope(|| key_message(W::cut(message, &keying.table), keying, retention))
            }
            KeyingState::Unavailable(retry) => unkeyed(message, retry.clone()),
            KeyingState::NothingToKey => unkeyed(message, not_keyed()),
        })
        .collect()
}

/// What the keying takes a message's writes as: cut into writes under the layout.
trait Cut: Sized {
    /// `message`, its writes cut under `table`, or refused when one of its readings
    /// cannot be keyed.
    fn cut(message: Message<Self>, table: &TableHistory) -> Message<UnkeyedWrite>;
}

/// Packed by the pack stage: cut already.
impl Cut for UnkeyedWrite {
    fn cut(message: Message<Self>, _: &TableHistory) -> Message<UnkeyedWrite> {
        message
    }
}

/// Readings not packed: cut alone now (`super::pack::alone`).
impl Cut for Reading {
    fn cut(message: Message<Self>, table: &TableHistory) -> Message<UnkeyedWrite> {
        let Message::Alone(readings) = message else {
            // Readings not packed are in no group: only their own, or a stop.
            return unkeyed(message, not_keyed());
        };
        let cut = guarded(|| {
            check_keyable(&readings, table).map_err(Stopped::Refused)?;
            Ok(alone(readings, table))
        });
        match cut {
            Ok(writes) => Message::Alone(writes),
            Err(stopped) => Message::Stopped(stopped),
        }
    }
}

/// Keys one message's writes: its own, or its group's, which the group's members
/// share.
fn key_message(
    message: Message<UnkeyedWrite>,
    keying: &Keying,
    retention: Duration,
) -> Message<KeyedWrite> {
    match message {
        Message::Alone(writes) => match guarded(|| key_writes(writes, keying, retention)) {
            Ok(writes) => Message::Alone(writes),
            Err(stopped) => Message::Stopped(stopped),
        },
        Message::Carries(Group { members, writes }) => {
            let writes = writes.and_then(|shared| {
                let (writes, member_messages): (Vec<UnkeyedWrite>, Vec<Vec<u32>>) = shared
                    .into_iter()
                    .map(|s| (s.write, s.member_messages))
                    .unzip();
                let keyed = guarded(|| key_writes(writes, keying, retention))?;
                Ok(keyed
                    .into_iter()
                    .zip(member_messages)
                    .map(|(write, member_messages)| Shared {
                        write,
                        member_messages,
                    })
                    .collect())
            });
            Message::Carries(Group { members, writes })
        }
        Message::PackedWith { carrier } => Message::PackedWith { carrier },
        Message::Stopped(stopped) => Message::Stopped(stopped),
    }
}

/// The write of `members` (an entry of `store::pack`) by a writer at `now`: its key
/// (its first member's write key, a block's with its digest), with the fan-out it
/// was made under, and its item (that reading's own, or the members' block, expiring
/// after `retention`), sized: `unkeyed` under that key when the pack stage encoded it,
/// else encoded now.
pub(super) fn keyed_item(
    members: &[Reading],
    unkeyed: Option<Encoded>,
    table: &TableHistory,
    fanout: &FanoutHistory,
    now: Timestamp,
    retention: Duration,
) -> Result<KeyedItem, ItemError> {
    let first = members.first().ok_or(ItemError::Empty)?;
    let reading_ref =
        ReadingRef::new(&first.device_id, &first.event_id, first.ts).with_tags(&first.tags);
    let first_key = write_key(&reading_ref, table, fanout, now).map_err(ItemError::Key)?;
    let key = WriteKey {
        key: pack::item_key(members, &first_key.key),
        fanout: first_key.fanout,
    };
    let encoded = match unkeyed {
        Some(encoded) => pack::with_key(encoded, &key.key),
        None => pack::encode(members, &key.key, retention).map_err(ItemError::Block)?,
    };
    let item = SizedItem::new(encoded.item, encoded.size).map_err(ItemError::TooLarge)?;
    Ok(KeyedItem { key, item })
}

/// The key of the slab at `place` whose group's fan-out history is `fanout`, at `now`:
/// `k` is the group's fan-out in force at the keying time of its window's start
/// (`sharding::epoch::keying_time`; the layout's default where the group has none, as
/// for a device), and the slab takes the fan-out key its sort key hashes to
/// (`sharding::slab::fanout_key`).
pub(super) fn slab_key(
    place: &SlabPlace,
    table: &TableHistory,
    fanout: &FanoutHistory,
    now: Timestamp,
) -> WriteKey {
    let start = place.window.start();
    let k = fanout
        .for_write(start, now)
        .unwrap_or_else(|| table.at(start).default_fanout())
        .max(1);
    WriteKey {
        key: ItemKey {
            pk: place.owner.pk(slab::fanout_key(&place.sk, k), place.window),
            sk: place.sk.clone(),
        },
        fanout: k,
    }
}

/// The write of the slab of `members` at `place`, keyed by [`slab_key`], its item
/// `unkeyed` under that key when the pack stage encoded it, else encoded now.
pub(super) fn keyed_slab(
    members: &[Reading],
    place: &SlabPlace,
    unkeyed: Option<Encoded>,
    table: &TableHistory,
    fanout: &FanoutHistory,
    now: Timestamp,
) -> Result<KeyedItem, ItemError> {
    let key = slab_key(place, table, fanout, now);
    let encoded = match unkeyed {
        Some(encoded) => pack::with_key(encoded, &key.key),
        None => store::slab::marshal(members, &key.key.pk, &key.key.sk, place.ttl)
            .map_err(|e| ItemError::Block(StoreError::Malformed(e.to_string())))?,
    };
    let item = SizedItem::new(encoded.item, encoded.size).map_err(ItemError::TooLarge)?;
    Ok(KeyedItem { key, item })
}

/// Keys the batch's slabs with `keying`: a slab that cannot be keyed (the layout or
/// its group's fan-out could not be read) fails, to be retried with the messages it
/// holds readings of, and one whose item cannot be made is refused.
pub(super) fn key_slabs(
    slabs: Vec<Shared<UnkeyedSlab>>,
    keying: &KeyingState,
) -> Vec<Shared<KeyedWrite>> {
    slabs
        .into_iter()
        .map(
            |Shared {
                 write,
                 member_messages,
             }| {
                let UnkeyedSlab {
                    readings,
                    place,
                    item,
                } = write;
                let keyed = match keying {
                    KeyingState::Ready(keying) => match keying.fanouts.get(&place.entity) {
                        Some(Ok(history)) => {
                            keyed_slab(&readings, &place, item, &keying.table, history, keying.now)
                                .map_err(|err| Outcome::FailedPermanent {
                                    reason: err.to_string(),
                                })
                        }
                        Some(Err(err)) => Err(retryable(format!(
                            "shard metadata of {} unavailable: {err}",
                            place.entity
                        ))),
                        None => Err(retryable(format!(
                            "shard metadata of {} not loaded",
                            place.entity
                        ))),
                    },
                    KeyingState::Unavailable(retry) => Err(retryable(retry.to_string())),
                    KeyingState::NothingToKey => Err(retryable(not_keyed().to_string())),
                };
                let write = match keyed {
                    Ok(KeyedItem { key, item }) => KeyedWrite {
                        readings,
                        key: key.key,
                        fanout: key.fanout,
                        item: Some(item),
                        outcome: None,
                        slab: Some(place),
                    },
                    Err(outcome) => KeyedWrite {
                        readings,
                        key: ItemKey {
                            pk: place.owner.pk(0, place.window),
                            sk: place.sk.clone(),
                        },
                        fanout: 1,
                        item: None,
                        outcome: Some(outcome),
                        slab: Some(place),
                    },
                };
                Shared {
                    write,
                    member_messages,
                }
            },
        )
        .collect()
}

/// A write's outcome when it could not be tried, for `reason`: another delivery may.
fn retryable(reason: String) -> Outcome {
    Outcome::FailedRetryable {
        reason,
        throttle: None,
    }
}

/// Keys one message's writes (`store::pack`'s entries, packed by the pack stage or cut
/// by the keying), or refuses the message, or retries it when a fan-out it needs could
/// not be read.
fn key_writes(
    writes: Vec<UnkeyedWrite>,
    keying: &Keying,
    retention: Duration,
) -> Result<Vec<KeyedWrite>, Stopped> {
    let mut keyed = Vec::with_capacity(writes.len());
    for UnkeyedWrite {
        readings: members,
        index,
        item,
    } in writes
    {
        let device = &members[0].device_id;
        let fanout = match keying.fanouts.get(device) {
            Some(Ok(history)) => history,
            Some(Err(err)) => {
                return Err(Stopped::Retry(Retry::Failed(format!(
                    "shard metadata of {device} unavailable: {err}"
                ))));
            }
            None => {
                return Err(Stopped::Retry(Retry::Failed(format!(
                    "shard metadata of {device} not loaded"
                ))));
            }
        };
        match keyed_item(&members, item, &keying.table, fanout, keying.now, retention) {
            Ok(KeyedItem { key, item }) => keyed.push(KeyedWrite {
                readings: members,
                slab: None,
                key: key.key,
                fanout: key.fanout,
                item: Some(item),
                outcome: None,
            }),
            Err(ItemError::Key(err)) => {
                return Err(Stopped::Refused(key_refusal(index, &err)));
            }
            Err(err) => {
                return Err(Stopped::Refused(Refusal {
                    field: index
                        .map(|i| format!("readings[{i}]"))
                        .unwrap_or_else(|| "body".to_owned()),
                    rule: err.to_string(),
                }));
            }
        }
    }
    Ok(keyed)
}

/// A message not keyed, for `retry`: one with writes or readings to key is to be
/// retried, a group it carries as a whole (which its members share), unless it
/// stopped before.
fn unkeyed<W, K>(message: Message<W>, retry: Retry) -> Message<K> {
    match message {
        Message::Alone(_) => Message::Stopped(Stopped::Retry(retry)),
        Message::Carries(Group { members, writes }) => Message::Carries(Group {
            members,
            writes: writes.and(Err(Stopped::Retry(retry))),
        }),
        Message::PackedWith { carrier } => Message::PackedWith { carrier },
        Message::Stopped(stopped) => Message::Stopped(stopped),
    }
}

/// Why a message to key was not: nothing was read to key it with.
fn not_keyed() -> Retry {
    Retry::Failed("not keyed".to_owned())
}
