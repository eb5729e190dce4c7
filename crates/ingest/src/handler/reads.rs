//! The directory's reads the pure stages are given: the layout the messages are packed,
//! their rates measured and their readings keyed under, and each entity's fan-out in
//! force now ([`KeyingState`]).

use std::collections::BTreeSet;

use futures::StreamExt;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::time::Timestamp;
use store::StoreError;
use store::batch::BatchTable;
use store::directory::ShardStore;
use store::queue::Queue;
use tokio::time::Instant;

use super::keying::{Fanouts, Keying, KeyingState};
use super::stages::{Packed, ParsedMessage};
use super::{BatchContext, Ingest};
use crate::fate::Retry;

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// The table layout the messages are packed, their rates measured and their readings
    /// keyed under (whether the writes pack blocks). Without it, the rates count one
    /// item a reading, and the keying reads it again, or reports the batch.
    pub(super) async fn rate_layout(
        &self,
        parsed: &[ParsedMessage],
        cx: &BatchContext<'_>,
    ) -> Option<TableHistory> {
        if !parsed.iter().any(Result::is_ok) {
            return None;
        }
        tokio::time::timeout_at(cx.work_deadline, self.directory.layout(cx.now))
            .await
            .ok()?
            .ok()
    }

    /// Reads the layout and each entity's fan-out in force now, with which
    /// `super::keying::key_batch` keys every message it has to key: nothing when there
    /// is none, and why every one of them is to be retried when the layout cannot be
    /// read. `layout` is the one the rates were measured and the messages packed under,
    /// when it was read: the keys are made under the same one.
    pub(super) async fn load_keying(
        &self,
        packed: &Packed,
        layout: Option<TableHistory>,
        cx: &BatchContext<'_>,
    ) -> KeyingState {
        if !packed.to_key() {
            return KeyingState::NothingToKey;
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
                return KeyingState::Unavailable(Retry::Failed(format!(
                    "shard layout unavailable: {err}"
                )));
            }
        };
        let fanouts = self.fanouts(packed.entities(), now, cx.work_deadline).await;
        KeyingState::Ready(Keying {
            table,
            fanouts,
            now,
        })
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
}
