//! Stage 2, its slabs (docs/design-slabs.md): which of the packed writes go to slabs
//! instead, and the slabs they make. No I/O: the packed messages, the layout and the
//! invocation's [`SlabClock`] in, the slabs out.
//!
//! # Which readings
//! A device's share of the batch goes to slabs when the items the pack stage encoded
//! for it (its blocks, or its readings' own items) take at most one write unit's bytes
//! in all ([`WCU_BYTES`]): today it pays at least a write unit an item, in a slab a
//! fraction of one. A device whose share takes more keeps its items, whose write units
//! its readings fill. Of an eligible device, a write goes to a slab when the slab
//! layout in force at each of its readings accepts it at the invocation's clock
//! (`SlabLayout::accepts`) and compaction does not lag (`SlabLayout::writes_slabs`); a
//! write holding a reading too old for a slab keeps its device's path whole, so a
//! block is never cut again.
//!
//! # The slabs
//! The readings sent to slabs are grouped by slab group and window, sorted by `(device,
//! ts, event id)`, and cut (`store::slab::cut`, each item sized as encoded) into slabs,
//! each identity once: of two copies in the batch, the one written last
//! (`sharding::written`; of one message's, the first sent) is cut first, and a copy goes
//! to a later slab of the window, so every reading of every message is in exactly one
//! write. Where the layout shares slabs, the groups of a window whose slab would fill
//! under half an item (`sharding::slab::thin_groups`, each group's first copies
//! encoded as one slab) are cut together instead, into the window's shared partition.
//! The same readings make the same slabs, under the same sort keys.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::mem;

use sharding::epoch::TableHistory;
use sharding::slab::{self, SlabLayout, SlabOwner, Window};
use sharding::time::Timestamp;
use store::Reading;
use store::size::WCU_BYTES;

use super::stages::{Group, Message, Shared, SlabPlace, UnkeyedSlab, UnkeyedWrite};

/// A reading sent to a slab, and the message (its index in the batch) it came from.
type Member = (Reading, u32);

/// What the invocation decides slabs by: its clock, and how far compaction has got
/// (`None`: it has not reported yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlabClock {
    pub(crate) now: Timestamp,
    pub(crate) compacted_to: Option<Timestamp>,
}

impl SlabClock {
    /// The slab layout that takes `reading`, when one does: the one in force at its
    /// timestamp, accepting its age at the invocation's clock, with compaction not
    /// lagging.
    fn layout_for(&self, reading: &Reading, table: &TableHistory) -> Option<SlabLayout> {
        let layout = table.at(reading.ts).slabs?;
        (layout.accepts(reading.ts, self.now) && layout.writes_slabs(self.now, self.compacted_to))
            .then_some(layout)
    }
}

/// Whether any epoch of `table` writes slabs.
pub(crate) fn writes_slabs(table: &TableHistory) -> bool {
    table.epochs().iter().any(|e| e.value.slabs.is_some())
}

/// The bytes a write's item takes: its encoded size, else its readings' bounds.
fn write_bytes(write: &UnkeyedWrite) -> usize {
    write.item.as_ref().map_or_else(
        || write.readings.iter().map(Reading::item_size_bound).sum(),
        |item| item.size,
    )
}

/// Takes out of `messages` (the pack stage's, in the batch's order) the writes that go
/// to slabs (the module's rule), and gives the slabs their readings make.
pub(crate) fn take_slabs(
    messages: &mut [Message<UnkeyedWrite>],
    table: &TableHistory,
    clock: &SlabClock,
) -> Vec<Shared<UnkeyedSlab>> {
    let mut shares: HashMap<&str, usize> = HashMap::new();
    for write in messages.iter().flat_map(Message::writes) {
        if let Some(first) = write.readings.first() {
            *shares.entry(first.device_id.as_str()).or_default() += write_bytes(write);
        }
    }
    let eligible: Vec<String> = shares
        .into_iter()
        .filter(|(_, bytes)| *bytes <= WCU_BYTES)
        .map(|(device, _)| device.to_owned())
        .collect();
    if eligible.is_empty() {
        return Vec::new();
    }
    let goes = |write: &UnkeyedWrite| {
        write
            .readings
            .first()
            .is_some_and(|first| eligible.contains(&first.device_id))
            && write
                .readings
                .iter()
                .all(|r| clock.layout_for(r, table).is_some())
    };
    // Each reading sent to a slab, with its message.
    let mut taken: Vec<Member> = Vec::new();
    for (m, message) in messages.iter_mut().enumerate() {
        match message {
            Message::Alone(writes) => {
                let (to_slabs, kept): (Vec<_>, Vec<_>) =
                    mem::take(writes).into_iter().partition(goes);
                *writes = kept;
                let m = u32::try_from(m).unwrap_or(u32::MAX);
                taken.extend(
                    to_slabs
                        .into_iter()
                        .flat_map(|w| w.readings)
                        .map(|r| (r, m)),
                );
            }
            Message::Carries(Group {
                writes: Ok(shared), ..
            }) => {
                let (to_slabs, kept): (Vec<_>, Vec<_>) =
                    mem::take(shared).into_iter().partition(|s| goes(&s.write));
                *shared = kept;
                taken.extend(
                    to_slabs
                        .into_iter()
                        .flat_map(|s| s.write.readings.into_iter().zip(s.member_messages)),
                );
            }
            _ => {}
        }
    }
    let mut windows: BTreeMap<Window, (SlabLayout, BTreeMap<u32, Vec<Member>>)> = BTreeMap::new();
    for (reading, m) in taken {
        let Some(layout) = clock.layout_for(&reading, table) else {
            continue;
        };
        windows
            .entry(layout.window(reading.ts))
            .or_insert_with(|| (layout, BTreeMap::new()))
            .1
            .entry(layout.group(&reading.device_id))
            .or_default()
            .push((reading, m));
    }
    let mut slabs = Vec::new();
    for (window, (layout, mut groups)) in windows {
        for members in groups.values_mut() {
            sort(members);
        }
        let thin = if layout.shared_slabs {
            let bytes = groups
                .iter()
                .map(|(&group, members)| (group, slab_bytes(members, &layout, group, window)))
                .collect();
            slab::thin_groups(&bytes, layout.max_bytes)
        } else {
            BTreeSet::new()
        };
        let mut shared = Vec::new();
        for (group, members) in groups {
            if thin.contains(&group) {
                shared.extend(members);
            } else {
                slabs.extend(slabs_of(members, &layout, SlabOwner::Group(group), window));
            }
        }
        if !shared.is_empty() {
            sort(&mut shared);
            slabs.extend(slabs_of(shared, &layout, SlabOwner::Shared, window));
        }
    }
    slabs
}

/// Whether two readings are one: the same device, time and event id.
fn same(a: &Reading, b: &Reading) -> bool {
    a.device_id == b.device_id && a.ts == b.ts && a.event_id == b.event_id
}

/// Sorts `members` by `(device, ts, event id)`, of copies of one reading the one
/// written last first; stable, so of one message's copies the first sent stays first.
fn sort(members: &mut [Member]) {
    members.sort_by(|(a, _), (b, _)| {
        (
            &a.device_id,
            a.ts,
            &a.event_id,
            std::cmp::Reverse(a.written),
        )
            .cmp(&(
                &b.device_id,
                b.ts,
                &b.event_id,
                std::cmp::Reverse(b.written),
            ))
    });
}

/// The bytes of `group`'s slab of `window` were it one item: the first copy of each of
/// its readings (`members`, sorted) encoded under the longest key its slabs can get.
/// What cannot be encoded counts as no slab could hold it; so do more readings than
/// half an item has bytes (a member packs to at least a byte), which are not encoded:
/// a busy group is not encoded once more to learn it is not thin.
fn slab_bytes(members: &[Member], layout: &SlabLayout, group: u32, window: Window) -> usize {
    let mut firsts: Vec<&Reading> = Vec::new();
    for (reading, _) in members {
        if firsts.last().is_none_or(|last| !same(last, reading)) {
            firsts.push(reading);
        }
    }
    if !slab::is_thin(firsts.len(), layout.max_bytes) {
        return usize::MAX;
    }
    let pk = SlabOwner::Group(group).pk(u32::MAX, window);
    let sk = "0".repeat(slab::slab_sk([]).len());
    store::slab::marshal(&firsts, &pk, &sk, layout.expires_at(window))
        .map_or(usize::MAX, |encoded| encoded.size)
}

/// The slabs of one partition's readings of a window (`members`, sorted by [`sort`]):
/// each identity once a slab (the copy written last first), cut by the layout's bytes.
fn slabs_of(
    mut members: Vec<Member>,
    layout: &SlabLayout,
    owner: SlabOwner,
    window: Window,
) -> Vec<Shared<UnkeyedSlab>> {
    // The longest partition key a fan-out can give, and a digest's length.
    let placeholder_pk = owner.pk(u32::MAX, window);
    let key_lens = (placeholder_pk.len(), slab::slab_sk([]).len());
    let entity = owner.entity();
    let ttl = layout.expires_at(window);
    let mut slabs = Vec::new();
    while !members.is_empty() {
        let (mut firsts, mut copies) = (Vec::new(), Vec::new());
        for member in members {
            let repeat = firsts
                .last()
                .is_some_and(|(last, _): &Member| same(last, &member.0));
            if repeat {
                copies.push(member);
            } else {
                firsts.push(member);
            }
        }
        let readings: Vec<&Reading> = firsts.iter().map(|(r, _)| r).collect();
        // Sorted, each identity once: the cut cannot refuse them; were it to, each
        // reading alone is a slab, refused by `marshal` as it is.
        let cuts = store::slab::cut(&readings, layout.max_bytes as usize, key_lens)
            .unwrap_or_else(|_| (0..readings.len()).map(|i| i..i + 1).collect());
        let mut rest = firsts.into_iter();
        for range in cuts {
            let (readings, from): (Vec<Reading>, Vec<u32>) =
                rest.by_ref().take(range.len()).unzip();
            let sk = slab::slab_sk(
                readings
                    .iter()
                    .map(|r| (r.device_id.as_str(), r.ts.as_millis(), r.event_id.as_str())),
            );
            let item = store::slab::marshal(&readings, &placeholder_pk, &sk, ttl).ok();
            slabs.push(Shared {
                write: UnkeyedSlab {
                    readings,
                    place: SlabPlace {
                        owner,
                        entity: entity.clone(),
                        window,
                        sk,
                        ttl,
                    },
                    item,
                },
                member_messages: from,
            });
        }
        members = copies;
    }
    slabs
}
