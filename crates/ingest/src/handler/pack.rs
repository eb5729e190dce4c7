//! Stage 2, where the layout packs blocks or writes slabs: the parsed messages' readings
//! packed into writes (`store::pack`), and each write's item encoded once, under a
//! placeholder key as long as any key it can get (`store::pack::encode_unkeyed`); then
//! the writes of the devices whose share of the batch fills no write unit taken out into
//! slabs (`super::slabs`). The rates stage
//! measures a device's rate by those items' sizes, and the keying then sets each item's
//! key (`store::pack::with_key`): an item is encoded once, not once for the rate and
//! again for the write. A reading that cannot be keyed refuses its message here, as the
//! keying would.
//!
//! The messages of one device in a batch are packed together ([`groups`]), so a device
//! sending a reading a message writes blocks too: a [`Group`] owns its members and its
//! writes, each write naming the member message of each of its readings; the first
//! member carries the group (`Message::Carries`) and the others name it
//! (`Message::PackedWith`); each message's fate then follows the writes that
//! hold its readings (`super::settle::settle_batch`). A message that shares a reading
//! with another (a copy sent twice) is packed alone, so a write never holds two
//! messages' copies of one reading, and a publisher's retry in the same batch rebuilds
//! and overwrites its blocks. A retry or a redelivery that lands in a later batch may
//! meet other messages of its device there and be packed into other blocks: its
//! readings are then stored twice (reads answer each once; `shardline audit` counts
//! the copy), as docs/design-blocks.md says.

use std::collections::HashMap;
use std::time::Duration;

use sharding::epoch::TableHistory;
use sharding::key::{KeyError, ReadingRef, validate_id};
use sharding::layout::Strategy;
use store::Reading;
use store::pack;
use tracing::Span;

use super::guarded;
use super::slabs::{SlabClock, take_slabs};
use super::stages::{Group, Message, Packed, ParsedMessage, Shared, UnkeyedSlab, UnkeyedWrite};
use crate::fate::Stopped;
use crate::message::Refusal;

/// Stage 2: packs and encodes every parsed message (whose spans are `spans`) where
/// `layout` was read and packs blocks or, by `slabs` (the invocation's clock, when it
/// writes slabs), writes slabs, each device's messages together, then takes out the
/// writes that go to slabs (`super::slabs`) and gives them beside the batch as slabs;
/// elsewhere each parsed message is left unpacked, for the keying to pack alone, each
/// reading its own item, sized by its bound, and nothing is encoded before the keying.
/// `retention` sets each encoded item's expiry.
pub(super) fn pack_batch(
    parsed: Vec<ParsedMessage>,
    layout: Option<&TableHistory>,
    slabs: Option<&SlabClock>,
    retention: Duration,
    spans: &[Span],
) -> (Packed, Vec<Shared<UnkeyedSlab>>) {
    let packs = |table: &TableHistory| {
        pack::packs_blocks(table) || (slabs.is_some() && super::slabs::writes_slabs(table))
    };
    let Some(table) = layout.filter(|table| packs(table)) else {
        let unpacked = parsed
            .into_iter()
            .map(|message| match message {
                Ok(readings) => Message::Alone(readings),
                Err(stopped) => Message::Stopped(stopped),
            })
            .collect();
        return (Packed::Unpacked(unpacked), Vec::new());
    };
    // A reading that cannot be keyed refuses its own message, before any group.
    let mut checked: Vec<ParsedMessage> = parsed
        .into_iter()
        .zip(spans)
        .map(|(message, span)| {
            let readings = message?;
            span.in_scope(|| {
                guarded(|| {
                    check_keyable(&readings, table).map_err(Stopped::Refused)?;
                    Ok(readings)
                })
            })
        })
        .collect();
    let mut packed: Vec<Option<Message<UnkeyedWrite>>> = std::iter::repeat_with(|| None)
        .take(checked.len())
        .collect();
    for members in groups(&checked) {
        let carrier = members[0];
        let writes = spans[carrier].in_scope(|| {
            let mut readings = Vec::new();
            let mut from = Vec::new();
            for &member in &members {
                if let Ok(own) = &mut checked[member] {
                    from.extend(std::iter::repeat_n(member as u32, own.len()));
                    readings.append(own);
                }
            }
            guarded(|| Ok(pack_group(readings, &from, table, retention)))
        });
        for &member in &members[1..] {
            packed[member] = Some(Message::PackedWith { carrier });
        }
        packed[carrier] = Some(Message::Carries(Group { members, writes }));
    }
    let mut messages: Vec<Message<UnkeyedWrite>> = checked
        .into_iter()
        .zip(packed)
        .zip(spans)
        .map(|((message, packed), span)| {
            packed.unwrap_or_else(|| {
                let packed = message.and_then(|readings| {
                    span.in_scope(|| guarded(|| Ok(pack_alone(readings, table, retention))))
                });
                match packed {
                    Ok(writes) => Message::Alone(writes),
                    Err(stopped) => Message::Stopped(stopped),
                }
            })
        })
        .collect();
    let slabs = slabs.map_or_else(Vec::new, |clock| take_slabs(&mut messages, table, clock));
    (Packed::Packed(messages), slabs)
}

/// One message's readings packed into writes (`store::pack`, [`alone`]), each
/// encoded before it is keyed; a write whose item cannot be made is left to the
/// keying to refuse, with its reason.
fn pack_alone(
    readings: Vec<Reading>,
    table: &TableHistory,
    retention: Duration,
) -> Vec<UnkeyedWrite> {
    let mut writes = alone(readings, table);
    for write in &mut writes {
        write.item = pack::encode_unkeyed(&write.readings, retention).ok();
    }
    writes
}

/// A group's readings packed into writes, `from` naming the member message of each
/// reading, each write encoded before it is keyed, as [`pack_alone`].
fn pack_group(
    readings: Vec<Reading>,
    from: &[u32],
    table: &TableHistory,
    retention: Duration,
) -> Vec<Shared<UnkeyedWrite>> {
    let units = pack::pack(&readings, table);
    pack::take(readings, &units)
        .into_iter()
        .zip(&units)
        .map(|(members, unit)| {
            let item = pack::encode_unkeyed(&members, retention).ok();
            Shared {
                write: UnkeyedWrite {
                    readings: members,
                    index: None,
                    item,
                },
                member_messages: unit.iter().filter_map(|&i| from.get(i).copied()).collect(),
            }
        })
        .collect()
}

/// One message's readings packed into writes (`store::pack`), not encoded yet: each
/// write names its first member's place in the message, for a refusal, when the
/// message has several readings.
pub(super) fn alone(readings: Vec<Reading>, table: &TableHistory) -> Vec<UnkeyedWrite> {
    let places = readings.len() > 1;
    let units = pack::pack(&readings, table);
    pack::take(readings, &units)
        .into_iter()
        .zip(&units)
        .map(|(members, unit)| UnkeyedWrite {
            readings: members,
            index: places.then_some(unit[0]),
            item: None,
        })
        .collect()
}

/// Whether every reading of a message can be keyed, or the refusal of the first that
/// cannot: every reading is checked as its own key would check it, member of a block
/// or not, so packing changes no refusal.
pub(super) fn check_keyable(readings: &[Reading], table: &TableHistory) -> Result<(), Refusal> {
    let batch = readings.len() > 1;
    for (i, reading) in readings.iter().enumerate() {
        if let Err(err) = keyable(reading, table) {
            return Err(key_refusal(batch.then_some(i), &err));
        }
    }
    Ok(())
}

/// Whether `reading` can be keyed under the layout in force at its timestamp: its ids,
/// and the attribute a `Calculated` layout hashes.
fn keyable(reading: &Reading, table: &TableHistory) -> Result<(), KeyError> {
    validate_id("entity", &reading.device_id)?;
    validate_id("event_id", &reading.event_id)?;
    if let Strategy::Calculated { attribute } = &table.at(reading.ts).strategy {
        let reading_ref = ReadingRef::new(&reading.device_id, &reading.event_id, reading.ts)
            .with_tags(&reading.tags);
        if reading_ref.hashed(attribute).is_none() {
            return Err(KeyError::MissingAttribute {
                attribute: attribute.clone(),
            });
        }
    }
    Ok(())
}

/// The refusal of a reading whose key cannot be made (at `index` in its message, when
/// it has several).
pub(super) fn key_refusal(index: Option<usize>, err: &KeyError) -> Refusal {
    let prefix = index.map(|i| format!("readings[{i}].")).unwrap_or_default();
    let field = match err {
        KeyError::Empty { field }
        | KeyError::Separator { field }
        | KeyError::InvalidChar { field, .. }
        | KeyError::TooLong { field, .. } => {
            if *field == "entity" {
                "device_id".to_owned()
            } else {
                (*field).to_owned()
            }
        }
        KeyError::MissingAttribute { attribute } => format!("tags.{attribute}"),
    };
    Refusal {
        field: format!("{prefix}{field}"),
        rule: err.to_string(),
    }
}

/// A parsed message of one device's readings, and the span of their timestamps.
struct Candidate<'a> {
    index: usize,
    readings: &'a [Reading],
    first_ms: i64,
    last_ms: i64,
}

/// The messages of `parsed` packed together, by index, in order: for each device with
/// more than one parsed message holding its readings alone, those of them that share no
/// reading (its `(ts, event id)`) with another. A message sent twice (a publisher's
/// retry) is packed alone, as is its copy, into the same blocks under the same keys.
fn groups(parsed: &[ParsedMessage]) -> Vec<Vec<usize>> {
    let mut by_device: HashMap<&str, Vec<Candidate<'_>>> = HashMap::new();
    for (index, message) in parsed.iter().enumerate() {
        let Ok(readings) = message else {
            continue;
        };
        let Some(first) = readings.first() else {
            continue;
        };
        let (mut first_ms, mut last_ms, mut one_device) = (i64::MAX, i64::MIN, true);
        for r in readings {
            one_device &= r.device_id == first.device_id;
            first_ms = first_ms.min(r.ts.as_millis());
            last_ms = last_ms.max(r.ts.as_millis());
        }
        if one_device {
            by_device
                .entry(first.device_id.as_str())
                .or_default()
                .push(Candidate {
                    index,
                    readings,
                    first_ms,
                    last_ms,
                });
        }
    }
    // Most devices of a fleet send one message a batch: only those with more group.
    let mut groups: Vec<Vec<usize>> = by_device
        .into_values()
        .filter(|candidates| candidates.len() > 1)
        .filter_map(|mut candidates| {
            let group = sharing_none(&mut candidates);
            (group.len() > 1).then_some(group)
        })
        .collect();
    groups.sort_unstable();
    groups
}

/// The candidates (one device's) that share no reading with another, by index, in
/// order. Messages whose time spans do not overlap share none, so identities are
/// compared only within runs of overlapping spans: a device's messages of successive
/// readings cost a sort of the messages, not a set of their readings.
fn sharing_none(candidates: &mut [Candidate<'_>]) -> Vec<usize> {
    candidates.sort_unstable_by_key(|c| (c.first_ms, c.index));
    let mut out = Vec::with_capacity(candidates.len());
    let mut start = 0;
    while start < candidates.len() {
        let (mut end, mut last_ms) = (start + 1, candidates[start].last_ms);
        while end < candidates.len() && candidates[end].first_ms <= last_ms {
            last_ms = last_ms.max(candidates[end].last_ms);
            end += 1;
        }
        match &candidates[start..end] {
            [alone] => out.push(alone.index),
            overlapping => {
                // Each identity's message, or `usize::MAX` where two messages hold it.
                let mut owner: HashMap<(i64, &str), usize> = HashMap::new();
                for c in overlapping {
                    for r in c.readings {
                        owner
                            .entry((r.ts.as_millis(), r.event_id.as_str()))
                            .and_modify(|o| {
                                if *o != c.index {
                                    *o = usize::MAX;
                                }
                            })
                            .or_insert(c.index);
                    }
                }
                out.extend(
                    overlapping
                        .iter()
                        .filter(|c| {
                            c.readings.iter().all(|r| {
                                owner.get(&(r.ts.as_millis(), r.event_id.as_str()))
                                    == Some(&c.index)
                            })
                        })
                        .map(|c| c.index),
                );
            }
        }
        start = end;
    }
    out.sort_unstable();
    out
}
