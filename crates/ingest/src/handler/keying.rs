//! Stage 4: every parsed reading keyed. The layout and each entity's fan-out in force
//! now are read once ([`Ingest::load_keying`]); then each message's writes are keyed
//! ([`Ingest::key_stage`]): those the pack stage packed, with each item encoded before
//! its key, which is set here, or, where it did not pack them, its readings packed
//! alone now (`super::pack::alone`: blocks of one device's readings where the layout
//! packs them, else one item a reading). Each write's key is its first member's, from
//! `sharding::key::write_key` with the fan-out it was made under, and travels typed with
//! its item to the writer, which never reads a key out of an item.

use std::collections::{BTreeSet, HashMap};

use futures::StreamExt;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{KeyError, ReadingRef, WriteKey, write_key};
use sharding::time::Timestamp;
use store::batch::{BatchTable, ItemTooLarge, SizedItem};
use store::directory::ShardStore;
use store::queue::Queue;
use store::{Encoded, Reading, StoreError, pack};
use tokio::time::Instant;
use tracing::Span;

use super::pack::{alone, check_keyable, key_refusal};
use super::stages::{Group, KeyedMessage, KeyedWrite, PackedMessage, Shared, UnkeyedWrite};
use super::{BatchContext, Ingest, guarded};
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

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Reads the layout and each entity's fan-out in force now, with which
    /// [`Self::key_stage`] keys every message it has to key: `None` when there is none,
    /// and why every one of them is to be retried when the layout cannot be read.
    /// `layout` is the one the rates were measured and the messages packed under, when
    /// it was read: the keys are made under the same one.
    pub(super) async fn load_keying(
        &self,
        packed: &[PackedMessage],
        layout: Option<TableHistory>,
        cx: &BatchContext<'_>,
    ) -> Option<Result<Keying, Retry>> {
        if !packed.iter().any(PackedMessage::to_key) {
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
                return Some(Err(Retry::Failed(format!(
                    "shard layout unavailable: {err}"
                ))));
            }
        };
        let entities: BTreeSet<&str> = packed
            .iter()
            .flat_map(PackedMessage::readings)
            .map(|r| r.device_id.as_str())
            .collect();
        let fanouts = self.fanouts(entities, now, cx.work_deadline).await;
        Some(Ok(Keying {
            table,
            fanouts,
            now,
        }))
    }

    /// Stage 4: keys every message of `packed` that has writes or readings to key
    /// (whose spans are `spans`), with `keying` ([`Self::load_keying`]); when the
    /// layout could not be read, each of them is to be retried.
    pub(super) fn key_stage(
        &self,
        packed: Vec<PackedMessage>,
        keying: Option<&Result<Keying, Retry>>,
        spans: &[Span],
    ) -> Vec<KeyedMessage> {
        packed
            .into_iter()
            .zip(spans)
            .map(|(message, span)| match keying {
                Some(Ok(keying)) => span.in_scope(|| self.key_message(message, keying)),
                Some(Err(retry)) => unkeyed(message, retry.clone()),
                None => unkeyed(message, Retry::Failed("not keyed".to_owned())),
            })
            .collect()
    }

    /// Keys one message's writes: its own, or its group's, which the group's members
    /// share.
    fn key_message(&self, message: PackedMessage, keying: &Keying) -> KeyedMessage {
        let own = |writes: Result<Vec<KeyedWrite>, Stopped>| match writes {
            Ok(writes) => KeyedMessage::Alone(writes),
            Err(stopped) => KeyedMessage::Stopped(stopped),
        };
        match message {
            PackedMessage::Unpacked(readings) => own(guarded(|| {
                check_keyable(&readings, &keying.table).map_err(Stopped::Refused)?;
                self.key_writes(alone(readings, &keying.table), keying)
            })),
            PackedMessage::Alone(writes) => own(guarded(|| self.key_writes(writes, keying))),
            PackedMessage::Carries(Group { members, writes }) => {
                let writes = writes.and_then(|shared| {
                    let (writes, member_messages): (Vec<UnkeyedWrite>, Vec<Vec<u32>>) = shared
                        .into_iter()
                        .map(|s| (s.write, s.member_messages))
                        .unzip();
                    let keyed = guarded(|| self.key_writes(writes, keying))?;
                    Ok(keyed
                        .into_iter()
                        .zip(member_messages)
                        .map(|(write, member_messages)| Shared {
                            write,
                            member_messages,
                        })
                        .collect())
                });
                KeyedMessage::Carries(Group { members, writes })
            }
            PackedMessage::PackedWith { carrier } => KeyedMessage::PackedWith { carrier },
            PackedMessage::Stopped(stopped) => KeyedMessage::Stopped(stopped),
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

    /// Keys one message's writes (`store::pack`'s entries, packed by the pack stage or
    /// by [`Self::key_message`]), or refuses the message, or retries it when a fan-out
    /// it needs could not be read.
    fn key_writes(
        &self,
        writes: Vec<UnkeyedWrite>,
        keying: &Keying,
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
            match self.keyed_item(&members, item, &keying.table, fanout, keying.now) {
                Ok(KeyedItem { key, item }) => keyed.push(KeyedWrite {
                    readings: members,
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
}

/// A message not keyed, for `retry`: one with writes or readings to key is to be
/// retried, a group it carries as a whole (which its members share), unless it
/// stopped before.
fn unkeyed(message: PackedMessage, retry: Retry) -> KeyedMessage {
    match message {
        PackedMessage::Unpacked(_) | PackedMessage::Alone(_) => {
            KeyedMessage::Stopped(Stopped::Retry(retry))
        }
        PackedMessage::Carries(Group { members, writes }) => KeyedMessage::Carries(Group {
            members,
            writes: writes.and(Err(Stopped::Retry(retry))),
        }),
        PackedMessage::PackedWith { carrier } => KeyedMessage::PackedWith { carrier },
        PackedMessage::Stopped(stopped) => KeyedMessage::Stopped(stopped),
    }
}
