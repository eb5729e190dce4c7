//! Stage 3: every parsed reading keyed. The layout and each entity's fan-out in force
//! now are read once ([`Ingest::load_keying`]); each reading's key comes from
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
use store::{Reading, ReadingItem, StoreError};
use tokio::time::Instant;
use tracing::Span;

use super::{Ingest, Run, guarded};
use crate::fate::{Keyed, Retry, Stage};
use crate::message::Refusal;

/// Each entity's fan-out history, or why it could not be read.
pub(super) type Fanouts = HashMap<String, Result<FanoutHistory, StoreError>>;

/// What keying reads first: the layout and each entity's fan-out at `now`.
pub(super) struct Keying {
    pub(super) table: TableHistory,
    pub(super) fanouts: Fanouts,
    pub(super) now: Timestamp,
}

/// A reading's key, the fan-out it was made under, and its item.
pub(super) struct KeyedItem {
    pub(super) key: WriteKey,
    pub(super) item: SizedItem,
}

/// Why a reading has no item.
pub(super) enum ItemError {
    /// Its key cannot be made.
    Key(KeyError),
    /// The item would break DynamoDB's size limit.
    TooLarge(ItemTooLarge),
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

impl<T: BatchTable, S: ShardStore, Q: Queue> Ingest<T, S, Q> {
    /// Reads the layout and each entity's fan-out in force now, with which the write
    /// stage keys every parsed message ([`Self::key_messages`]); without a layout, every
    /// parsed message is reported.
    pub(super) async fn load_keying(&self, stages: &mut [Stage], run: &Run<'_>) -> Option<Keying> {
        if !stages.iter().any(|s| matches!(s, Stage::Parsed(_))) {
            return None;
        }
        let now = run.now;
        // Metadata reads are bounded by the deadline like the writes: a slow metadata
        // table must not keep the handler past it.
        let layout = tokio::time::timeout_at(run.work_deadline, self.directory.layout(now))
            .await
            .unwrap_or(Err(StoreError::Deadline));
        let table = match layout {
            Ok(table) => table,
            Err(err) => {
                tracing::warn!(error = %err, "shard layout unavailable");
                for stage in stages.iter_mut() {
                    if matches!(stage, Stage::Parsed(_)) {
                        *stage =
                            Stage::Retry(Retry::Failed(format!("shard layout unavailable: {err}")));
                    }
                }
                return None;
            }
        };
        let entities: BTreeSet<&str> = stages
            .iter()
            .filter_map(|s| match s {
                Stage::Parsed(readings) => Some(readings.iter().map(|r| r.device_id.as_str())),
                _ => None,
            })
            .flatten()
            .collect();
        let fanouts = self.fanouts(entities, now, run.work_deadline).await;
        Some(Keying {
            table,
            fanouts,
            now,
        })
    }

    /// Keys every parsed message of `stages` (whose spans are `spans`).
    pub(super) fn key_messages(&self, stages: &mut [Stage], spans: &[Span], keying: &Keying) {
        for (stage, span) in stages.iter_mut().zip(spans) {
            if let Stage::Parsed(readings) = stage {
                let readings = std::mem::take(readings);
                *stage = span.in_scope(|| {
                    guarded(|| {
                        self.key_message(readings, &keying.table, &keying.fanouts, keying.now)
                    })
                });
            }
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

    /// `reading` keyed by a writer at `now`: its key with the fan-out it was made under,
    /// and its item, sized.
    pub(super) fn keyed_item(
        &self,
        reading: &Reading,
        table: &TableHistory,
        fanout: &FanoutHistory,
        now: Timestamp,
    ) -> Result<KeyedItem, ItemError> {
        let reading_ref = ReadingRef::new(&reading.device_id, &reading.event_id, reading.ts)
            .with_tags(&reading.tags);
        let key = write_key(&reading_ref, table, fanout, now).map_err(ItemError::Key)?;
        let encoded = ReadingItem::marshal(reading, &key.key, self.config.retention);
        let item = SizedItem::new(encoded.item, encoded.size).map_err(ItemError::TooLarge)?;
        Ok(KeyedItem { key, item })
    }

    /// Keys one message's readings; a reading that cannot be keyed refuses the message.
    fn key_message(
        &self,
        readings: Vec<Reading>,
        table: &TableHistory,
        fanouts: &Fanouts,
        now: Timestamp,
    ) -> Stage {
        let batch = readings.len() > 1;
        let mut keyed = Vec::with_capacity(readings.len());
        for (i, reading) in readings.into_iter().enumerate() {
            let index = batch.then_some(i);
            let fanout = match fanouts.get(&reading.device_id) {
                Some(Ok(history)) => history,
                Some(Err(err)) => {
                    return Stage::Retry(Retry::Failed(format!(
                        "shard metadata of {} unavailable: {err}",
                        reading.device_id
                    )));
                }
                None => {
                    return Stage::Retry(Retry::Failed(format!(
                        "shard metadata of {} not loaded",
                        reading.device_id
                    )));
                }
            };
            match self.keyed_item(&reading, table, fanout, now) {
                Ok(KeyedItem { key, item }) => keyed.push(Keyed {
                    reading,
                    key: key.key,
                    fanout: key.fanout,
                    item: Some(item),
                    outcome: None,
                }),
                Err(ItemError::Key(err)) => return Stage::Refused(key_refusal(index, &err)),
                Err(ItemError::TooLarge(err)) => {
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
