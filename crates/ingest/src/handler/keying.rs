//! Stage 4: every parsed reading keyed. The layout and each entity's fan-out in force
//! now are read once ([`Ingest::load_keying`]); a message's readings are packed into
//! writes (`store::pack`: blocks of one device's readings where the layout packs them,
//! else one item a reading), by the pack stage where it ran, with each item encoded
//! before its key, which is set here; each write's key is its first member's, from
//! `sharding::key::write_key` with the fan-out it was made under, and travels typed with
//! its item to the writer, which never reads a key out of an item.

use std::collections::{BTreeSet, HashMap};

use futures::StreamExt;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{KeyError, ReadingRef, WriteKey, validate_id, write_key};
use sharding::layout::Strategy;
use sharding::time::Timestamp;
use store::batch::{BatchTable, ItemTooLarge, SizedItem};
use store::directory::ShardStore;
use store::queue::Queue;
use store::{Encoded, Reading, StoreError, pack};
use tokio::time::Instant;
use tracing::Span;

use super::{BatchContext, Ingest, guarded};
use crate::fate::{Keyed, Packed, Retry, Stage};
use crate::message::Refusal;

/// Each entity's fan-out history, or why it could not be read.
pub(super) type Fanouts = HashMap<String, Result<FanoutHistory, StoreError>>;

/// What keying reads first: the layout and each entity's fan-out at `now`.
pub(super) struct Keying {
    pub(super) table: TableHistory,
    pub(super) fanouts: Fanouts,
    pub(super) now: Timestamp,
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

/// The keyed readings of every message.
pub(super) fn keyed(stages: &[Stage]) -> impl Iterator<Item = &Keyed> {
    stages
        .iter()
        .filter_map(|s| match s {
            Stage::Keyed(keyed) => Some(keyed.iter()),
            _ => None,
        })
        .flatten()
}

/// The keyed readings of every message, to change.
pub(super) fn keyed_mut(stages: &mut [Stage]) -> impl Iterator<Item = &mut Keyed> {
    stages
        .iter_mut()
        .filter_map(|s| match s {
            Stage::Keyed(keyed) => Some(keyed.iter_mut()),
            _ => None,
        })
        .flatten()
}

fn key_refusal(index: Option<usize>, err: &KeyError) -> Refusal {
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

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Reads the layout and each entity's fan-out in force now, with which the write
    /// stage keys every parsed message ([`Self::key_messages`]); without a layout, every
    /// parsed message is reported. `layout` is the one the rates were measured and the
    /// messages packed under, when it was read: the keys are made under the same one.
    pub(super) async fn load_keying(
        &self,
        stages: &mut [Stage],
        layout: Option<TableHistory>,
        cx: &BatchContext<'_>,
    ) -> Option<Keying> {
        if !stages.iter().any(Stage::is_unkeyed) {
            return None;
        }
        let now = cx.now;
        let table = match layout {
            Some(table) => Ok(table),
            // Metadata reads are bounded by the deadline like the writes: a slow
            // metadata table must not keep the handler past it.
            None => tokio::time::timeout_at(cx.work_deadline, self.directory.layout(now))
                .await
                .unwrap_or(Err(StoreError::Deadline)),
        };
        let table = match table {
            Ok(table) => table,
            Err(err) => {
                tracing::warn!(error = %err, "shard layout unavailable");
                for stage in stages.iter_mut() {
                    if stage.is_unkeyed() {
                        *stage =
                            Stage::Retry(Retry::Failed(format!("shard layout unavailable: {err}")));
                    }
                }
                return None;
            }
        };
        let entities: BTreeSet<&str> = stages
            .iter()
            .flat_map(Stage::unkeyed_readings)
            .map(|r| r.device_id.as_str())
            .collect();
        let fanouts = self.fanouts(entities, now, cx.work_deadline).await;
        Some(Keying {
            table,
            fanouts,
            now,
        })
    }

    /// Keys every parsed message of `stages` (whose spans are `spans`).
    pub(super) fn key_messages(&self, stages: &mut [Stage], spans: &[Span], keying: &Keying) {
        for (stage, span) in stages.iter_mut().zip(spans) {
            let keyed = match stage {
                Stage::Parsed(readings) => {
                    let readings = std::mem::take(readings);
                    span.in_scope(|| {
                        guarded(|| {
                            self.key_message(readings, &keying.table, &keying.fanouts, keying.now)
                        })
                    })
                }
                Stage::Packed(writes) => {
                    let writes = std::mem::take(writes);
                    span.in_scope(|| {
                        guarded(|| {
                            self.key_writes(writes, &keying.table, &keying.fanouts, keying.now)
                        })
                    })
                }
                _ => continue,
            };
            *stage = keyed;
        }
    }

    /// Each entity's fan-out history (cached), or why it could not be read.
    pub(super) async fn fanouts(
        &self,
        entities: BTreeSet<&str>,
        now: Timestamp,
        deadline: Instant,
    ) -> Fanouts {
        // What the cache holds is read in one pass; the rest concurrently.
        let mut fanouts = Fanouts::with_capacity(entities.len());
        let mut missing = Vec::new();
        for entity in entities {
            match self.directory.fanout_cached(entity, now) {
                Some(history) => {
                    fanouts.insert(entity.to_owned(), Ok(history));
                }
                None => missing.push(entity),
            }
        }
        let read: Vec<(String, Result<FanoutHistory, StoreError>)> = futures::stream::iter(missing)
            .map(|entity| async move {
                let fanout = tokio::time::timeout_at(deadline, self.directory.fanout(entity, now))
                    .await
                    .unwrap_or(Err(StoreError::Deadline));
                (entity.to_owned(), fanout)
            })
            .buffer_unordered(self.config.max_inflight.max(1))
            .collect()
            .await;
        fanouts.extend(read);
        fanouts
    }

    /// The write of `members` (an entry of `store::pack`) by a writer at `now`: its key
    /// (its first member's write key, a block's with its digest), with the fan-out it
    /// was made under, and its item (that reading's own, or the members' block), sized:
    /// `unkeyed` under that key when the pack stage encoded it, else encoded now.
    pub(super) fn keyed_item(
        &self,
        members: &[Reading],
        unkeyed: Option<Encoded>,
        table: &TableHistory,
        fanout: &FanoutHistory,
        now: Timestamp,
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
            None => {
                pack::encode(members, &key.key, self.config.retention).map_err(ItemError::Block)?
            }
        };
        let item = SizedItem::new(encoded.item, encoded.size).map_err(ItemError::TooLarge)?;
        Ok(KeyedItem { key, item })
    }

    /// Keys one message's readings, packed into writes where the layout packs blocks
    /// (`store::pack`); a reading that cannot be keyed refuses the message.
    fn key_message(
        &self,
        readings: Vec<Reading>,
        table: &TableHistory,
        fanouts: &Fanouts,
        now: Timestamp,
    ) -> Stage {
        match check_keyable(&readings, table) {
            Ok(()) => self.key_writes(pack_readings(readings, &[], table), table, fanouts, now),
            Err(refusal) => Stage::Refused(refusal),
        }
    }

    /// Keys one message's writes (`store::pack`'s entries, packed by the pack stage or
    /// by [`Self::key_message`]).
    fn key_writes(
        &self,
        writes: Vec<Packed>,
        table: &TableHistory,
        fanouts: &Fanouts,
        now: Timestamp,
    ) -> Stage {
        let mut keyed = Vec::with_capacity(writes.len());
        for Packed {
            readings: members,
            index,
            item,
            origins,
        } in writes
        {
            let device = &members[0].device_id;
            let fanout = match fanouts.get(device) {
                Some(Ok(history)) => history,
                Some(Err(err)) => {
                    return Stage::Retry(Retry::Failed(format!(
                        "shard metadata of {device} unavailable: {err}"
                    )));
                }
                None => {
                    return Stage::Retry(Retry::Failed(format!(
                        "shard metadata of {device} not loaded"
                    )));
                }
            };
            match self.keyed_item(&members, item, table, fanout, now) {
                Ok(KeyedItem { key, item }) => keyed.push(Keyed {
                    readings: members,
                    key: key.key,
                    fanout: key.fanout,
                    item: Some(item),
                    outcome: None,
                    origins,
                }),
                Err(ItemError::Key(err)) => return Stage::Refused(key_refusal(index, &err)),
                Err(err) => {
                    return Stage::Refused(Refusal {
                        field: index
                            .map(|i| format!("readings[{i}]"))
                            .unwrap_or_else(|| "body".to_owned()),
                        rule: err.to_string(),
                    });
                }
            }
        }
        Stage::Keyed(keyed)
    }
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

/// Readings packed into writes (`store::pack`), not encoded yet: one message's
/// (`origins` empty: each write names its first member's place in the message, for a
/// refusal), or a group's of one device's messages (`origins`: the message of each
/// reading, kept for each member of each write).
pub(super) fn pack_readings(
    readings: Vec<Reading>,
    origins: &[u32],
    table: &TableHistory,
) -> Vec<Packed> {
    let places = origins.is_empty() && readings.len() > 1;
    let units = pack::pack(&readings, table);
    pack::take(readings, &units)
        .into_iter()
        .zip(&units)
        .map(|(members, unit)| Packed {
            readings: members,
            index: places.then_some(unit[0]),
            item: None,
            origins: unit
                .iter()
                .filter_map(|&i| origins.get(i).copied())
                .collect(),
        })
        .collect()
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
