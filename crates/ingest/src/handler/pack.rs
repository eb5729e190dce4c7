//! Stage 2, where the layout packs blocks: the parsed messages' readings packed into
//! writes (`store::pack`), and each write's item encoded once, under a placeholder key
//! as long as any key it can get (`store::pack::encode_unkeyed`). The observe stage
//! measures a device's rate by those items' sizes, and the keying then sets each item's
//! key (`store::pack::with_key`): an item is encoded once, not once for the rate and
//! again for the write. A reading that cannot be keyed refuses its message here, as the
//! keying would.
//!
//! The messages of one device in a batch are packed together ([`groups`]), so a device
//! sending a reading a message writes blocks too: the first of them carries the
//! group's writes, each member marked with the message it came from, and the others
//! are joined to it (`Stage::Joined`); each message's fate then follows the writes that
//! hold its readings (`crate::fate::settle_batch`). A message that shares a reading
//! with another (a copy sent twice) is packed alone, so a write never holds two
//! messages' copies of one reading, and a publisher's retry in the same batch rebuilds
//! and overwrites its blocks. A retry or a redelivery that lands in a later batch may
//! meet other messages of its device there and be packed into other blocks: its
//! readings are then stored twice (reads answer each once; `shardline audit` counts
//! the copy), as docs/design-blocks.md says.

use std::collections::HashMap;

use sharding::epoch::TableHistory;
use store::Reading;
use store::batch::BatchTable;
use store::directory::ShardStore;
use store::pack;
use store::queue::Queue;
use tracing::Span;

use super::keying::{check_keyable, pack_readings};
use super::{Ingest, guarded};
use crate::fate::Stage;

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Packs and encodes every parsed message of `stages` (whose spans are `spans`),
    /// where `table` packs blocks, each device's messages together; elsewhere a reading
    /// is its own item, sized by its bound, and nothing is encoded before the keying.
    pub(super) fn pack_stage(&self, stages: &mut [Stage], spans: &[Span], table: &TableHistory) {
        if !pack::packs_blocks(table) {
            return;
        }
        // A reading that cannot be keyed refuses its own message, before any group.
        for (stage, span) in stages.iter_mut().zip(spans) {
            if let Stage::Parsed(readings) = stage {
                let readings = std::mem::take(readings);
                *stage = span.in_scope(|| {
                    guarded(|| match check_keyable(&readings, table) {
                        Ok(()) => Stage::Parsed(readings),
                        Err(refusal) => Stage::Refused(refusal),
                    })
                });
            }
        }
        for group in groups(stages) {
            let carrier = group[0];
            let packed = spans[carrier].in_scope(|| {
                let mut readings = Vec::new();
                let mut origins = Vec::new();
                for &message in &group {
                    if let Stage::Parsed(own) = &mut stages[message] {
                        origins.extend(std::iter::repeat_n(message as u32, own.len()));
                        readings.append(own);
                    }
                }
                guarded(|| self.pack_writes(readings, &origins, table))
            });
            stages[carrier] = packed;
            for &message in &group[1..] {
                stages[message] = Stage::Joined(carrier);
            }
        }
        for (stage, span) in stages.iter_mut().zip(spans) {
            if let Stage::Parsed(readings) = stage {
                let readings = std::mem::take(readings);
                *stage = span.in_scope(|| guarded(|| self.pack_writes(readings, &[], table)));
            }
        }
    }

    /// Readings packed into writes (one message's, or a group's with `origins`, the
    /// message of each: `pack_readings`), each encoded before it is keyed; a write
    /// whose item cannot be made is left to the keying to refuse, with its reason.
    fn pack_writes(&self, readings: Vec<Reading>, origins: &[u32], table: &TableHistory) -> Stage {
        let mut writes = pack_readings(readings, origins, table);
        for write in &mut writes {
            write.item = pack::encode_unkeyed(&write.readings, self.config.retention).ok();
        }
        Stage::Packed(writes)
    }
}

/// A parsed message of one device's readings, and the span of their timestamps.
struct Candidate<'a> {
    index: usize,
    readings: &'a [Reading],
    first_ms: i64,
    last_ms: i64,
}

/// The messages of `stages` packed together, by index, in order: for each device with
/// more than one parsed message holding its readings alone, those of them that share no
/// reading (its `(ts, event id)`) with another. A message sent twice (a publisher's
/// retry) is packed alone, as is its copy, into the same blocks under the same keys.
fn groups(stages: &[Stage]) -> Vec<Vec<usize>> {
    let mut by_device: HashMap<&str, Vec<Candidate<'_>>> = HashMap::new();
    for (index, stage) in stages.iter().enumerate() {
        let Stage::Parsed(readings) = stage else {
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
