//! What each stage gives the next, one message of the batch at a time, in the batch's
//! order: one type, [`Message`], generic in the writes it carries. `parse` gives a
//! [`ParsedMessage`]; `pack` gives the keying a [`Packed`] batch, each message
//! carrying its readings not yet cut into writes (`Message<Reading>`) or its writes
//! packed and encoded before they are keyed (`Message<UnkeyedWrite>`); the keying gives
//! the writer `Message<KeyedWrite>`, and the writer gives `settle` the same, each write
//! with its outcome (`super::settle`).
//!
//! One device's messages of a batch may be packed together into one [`Group`]: the
//! group owns its members and its writes, and travels with its first member, which
//! carries it (`Carries`); every other member names that carrier (`PackedWith`). Each
//! shared write names the message each of its readings came from ([`Shared`]).
//!
//! The readings the pack stage sends to slabs (`super::slabs`) leave their messages'
//! writes: the batch's slabs travel beside the messages, each a [`Shared`] write
//! naming the message of each of its readings, as a group's do, so each message's fate
//! follows every write holding its readings, its own, its group's and the slabs'.

use std::collections::BTreeSet;

use sharding::key::ItemKey;
use sharding::slab::{SlabOwner, Window};
use store::Reading;
use store::batch::{Outcome, SizedItem};
use store::item::Encoded;

use crate::fate::Stopped;

/// A message as `parse` gives it: its readings, or why it stopped.
pub(crate) type ParsedMessage = Result<Vec<Reading>, Stopped>;

/// One message of the batch as a stage gives it, carrying writes of type `W`: a
/// reading not yet cut into writes, a write not yet keyed, or a keyed one.
#[derive(Debug)]
pub(crate) enum Message<W> {
    /// Its own writes.
    Alone(Vec<W>),
    /// The first member of a group of one device's messages: it carries the group.
    Carries(Group<W>),
    /// A member of the group carried by the message at `carrier`: its readings travel
    /// in that group's writes.
    PackedWith {
        /// The index in the batch of the message carrying the group.
        carrier: usize,
    },
    /// Stopped before its writes.
    Stopped(Stopped),
}

/// The batch as `pack` gives it to the keying: packed, or not (the layout packs no
/// blocks, or was not read), which the layout decides for the whole batch.
#[derive(Debug)]
pub(crate) enum Packed {
    /// Each message's readings, for the keying to cut into writes (each reading its own
    /// item, sized by its bound, where the layout packs no blocks).
    Unpacked(Vec<Message<Reading>>),
    /// Each message's writes, packed, each one's item encoded before it is keyed.
    Packed(Vec<Message<UnkeyedWrite>>),
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

/// Where a slab goes (`sharding::slab`): its partition's owner (its members' group, or
/// the window's shared partition), whose entity's fan-out keys it, its window, its
/// sort key (the digest of its members) and its expiry.
#[derive(Debug, Clone)]
pub(crate) struct SlabPlace {
    pub(crate) owner: SlabOwner,
    /// `owner.entity()`: the fan-out machinery's name of the partition.
    pub(crate) entity: String,
    pub(crate) window: Window,
    pub(crate) sk: String,
    /// Epoch seconds.
    pub(crate) ttl: i64,
}

/// A slab before it is keyed: its members, sorted by `(device, ts, event id)`, each
/// identity once, its place, and its item (`store::slab::marshal`) under a placeholder
/// partition key as long as any fan-out key gives it.
#[derive(Debug)]
pub(crate) struct UnkeyedSlab {
    pub(crate) readings: Vec<Reading>,
    pub(crate) place: SlabPlace,
    pub(crate) item: Option<Encoded>,
}

/// One write on its way to the table: a reading's own item, or a block of readings
/// (`store::pack`), keyed by its first member; or a slab of many devices' readings,
/// keyed by its group.
#[derive(Debug)]
pub(crate) struct KeyedWrite {
    /// The readings its item holds: one, or a block's members in order of `(ts, event
    /// id)`, or a slab's in order of `(device, ts, event id)`.
    pub(crate) readings: Vec<Reading>,
    /// Where it goes when it is a slab: its group's entity then keys it, not its first
    /// member's device.
    pub(crate) slab: Option<SlabPlace>,
    /// Its item's key: its first member's write key, made with `fanout` (a block's
    /// sort key with the digest of its members), or its slab's.
    pub(crate) key: ItemKey,
    /// The item to write next under `key` (taken while a round writes it).
    pub(crate) item: Option<SizedItem>,
    /// The fan-out its key was made with.
    pub(crate) fanout: u32,
    /// Its outcome, once final (a stale item has none until it is written again).
    pub(crate) outcome: Option<Outcome>,
}

/// What a stage's write carries: its readings.
pub(crate) trait Carried {
    /// The readings it holds, in order.
    fn readings(&self) -> &[Reading];
}

impl Carried for Reading {
    fn readings(&self) -> &[Reading] {
        std::slice::from_ref(self)
    }
}

impl Carried for UnkeyedWrite {
    fn readings(&self) -> &[Reading] {
        &self.readings
    }
}

impl Carried for KeyedWrite {
    fn readings(&self) -> &[Reading] {
        &self.readings
    }
}

impl Carried for UnkeyedSlab {
    fn readings(&self) -> &[Reading] {
        &self.readings
    }
}

impl KeyedWrite {
    /// The entity whose fan-out keys it: its slab's group, or its first member's device.
    pub(crate) fn entity(&self) -> &str {
        match &self.slab {
            Some(place) => &place.entity,
            None => self.readings.first().map_or("", |r| r.device_id.as_str()),
        }
    }
}

impl<W> Message<W> {
    /// The writes this message holds: its own, or its group's when it carries one
    /// (none of any other message).
    pub(crate) fn parts(&self) -> (&[W], &[Shared<W>]) {
        match self {
            Self::Alone(writes) => (writes, &[]),
            Self::Carries(Group {
                writes: Ok(shared), ..
            }) => (&[], shared),
            _ => (&[], &[]),
        }
    }

    /// The writes this message holds, in order: its own, or its group's.
    pub(crate) fn writes(&self) -> impl Iterator<Item = &W> {
        let (alone, shared) = self.parts();
        alone.iter().chain(shared.iter().map(|s| &s.write))
    }

    /// The writes this message holds, to change.
    pub(crate) fn writes_mut(&mut self) -> impl Iterator<Item = &mut W> {
        let (alone, shared): (&mut [W], &mut [Shared<W>]) = match self {
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

    /// Whether it holds writes (its own, or its group's) for the next stage to carry
    /// on with.
    pub(crate) fn has_writes(&self) -> bool {
        matches!(
            self,
            Self::Alone(_) | Self::Carries(Group { writes: Ok(_), .. })
        )
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

impl<W: Carried> Message<W> {
    /// The readings of the writes it holds: its own, or its group's when it carries one
    /// (none of any other message).
    pub(crate) fn readings(&self) -> impl Iterator<Item = &Reading> {
        self.writes().flat_map(Carried::readings)
    }
}

/// The readings of the written writes of `shared` (a group's or the batch's slabs),
/// each with the message it came from.
pub(crate) fn written_shared(
    shared: &[Shared<KeyedWrite>],
) -> impl Iterator<Item = (usize, &Reading)> {
    shared
        .iter()
        .filter(|s| matches!(s.write.outcome, Some(Outcome::Written)))
        .flat_map(|s| {
            s.member_messages
                .iter()
                .zip(&s.write.readings)
                .map(|(&member, r)| (member as usize, r))
        })
}

impl Message<KeyedWrite> {
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
        alone.chain(written_shared(shared))
    }
}

/// Every write of `messages`, in the batch's order (a group's where its carrier is).
pub(crate) fn writes<W>(messages: &[Message<W>]) -> impl Iterator<Item = &W> {
    messages.iter().flat_map(Message::writes)
}

/// Every write of `messages`, to change, in the batch's order.
pub(crate) fn writes_mut<W>(messages: &mut [Message<W>]) -> impl Iterator<Item = &mut W> {
    messages.iter_mut().flat_map(Message::writes_mut)
}

impl Packed {
    /// Whether any message has writes or readings to key.
    pub(crate) fn to_key(&self) -> bool {
        match self {
            Self::Unpacked(messages) => messages.iter().any(Message::has_writes),
            Self::Packed(messages) => messages.iter().any(Message::has_writes),
        }
    }

    /// The entities whose readings the keying keys.
    pub(crate) fn entities(&self) -> BTreeSet<&str> {
        fn of<W: Carried>(messages: &[Message<W>]) -> BTreeSet<&str> {
            messages
                .iter()
                .flat_map(Message::readings)
                .map(|r| r.device_id.as_str())
                .collect()
        }
        match self {
            Self::Unpacked(messages) => of(messages),
            Self::Packed(messages) => of(messages),
        }
    }

    /// How many messages.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Unpacked(messages) => messages.len(),
            Self::Packed(messages) => messages.len(),
        }
    }

    /// The batch in two waves ([`waves`]), or one when `readings` is none.
    pub(crate) fn waves(self, readings: Option<usize>) -> (Self, Option<Self>) {
        let Some(readings) = readings else {
            return (self, None);
        };
        match self {
            Self::Unpacked(messages) => {
                let (first, rest) = waves(messages, readings);
                (Self::Unpacked(first), rest.map(Self::Unpacked))
            }
            Self::Packed(messages) => {
                let (first, rest) = waves(messages, readings);
                (Self::Packed(first), rest.map(Self::Packed))
            }
        }
    }
}

/// `messages` in two waves, where the first holds the messages up to the first whose
/// readings to key bring the count to `readings`, and the rest holds more to key:
/// `None` for the rest when it would hold nothing to key (all is then the first wave).
pub(crate) fn waves<W: Carried>(
    mut messages: Vec<Message<W>>,
    readings: usize,
) -> (Vec<Message<W>>, Option<Vec<Message<W>>>) {
    let mut count = 0;
    let mut split = messages.len();
    for (i, message) in messages.iter().enumerate() {
        if message.has_writes() {
            count += message.readings().count();
            if count >= readings {
                split = i + 1;
                break;
            }
        }
    }
    if !messages
        .get(split..)
        .unwrap_or_default()
        .iter()
        .any(Message::has_writes)
    {
        return (messages, None);
    }
    let rest = messages.split_off(split);
    (messages, Some(rest))
}
