//! The reads the pure stages are given: the layout the messages are packed, their rates
//! measured and their readings keyed under, each entity's fan-out in force now
//! ([`KeyingState`]), and how far compaction has got, which decides whether the
//! invocation writes slabs ([`SlabClock`]).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::time::Timestamp;
use store::StoreError;
use store::batch::BatchTable;
use store::directory::ShardStore;
use store::queue::Queue;
use store::rollup::RollupTable;
use store::rollup::compaction::read_compacted;
use tokio::time::Instant;

use super::keying::{Fanouts, Keying, KeyingState};
use super::slabs::{SlabClock, writes_slabs};
use super::stages::{Packed, ParsedMessage, Shared, UnkeyedSlab};
use super::{BatchContext, Ingest};
use crate::fate::Retry;

/// How old a read of the compaction progress may be before a container reads it again:
/// a minute, as the sealer's horizon ([`store::rollup::horizon::INGEST_REFRESH`]).
/// Compaction's lag is decided in hours (`SlabLayout::fallback_lag`), and an older read
/// only overstates it.
const COMPACTION_REFRESH: Duration = store::rollup::horizon::INGEST_REFRESH;

/// How old a read finding no compaction progress may be before a container reads it
/// again: a few seconds, so a table new to slabs starts writing them soon after the
/// sealer's first run has set its progress (none, no slab is written).
const NO_PROGRESS_REFRESH: Duration = Duration::from_secs(5);

/// The compaction progress last read, per container: when (the invocation's clock,
/// ms), and the start of the first window not compacted (`None`: nothing compacted
/// yet).
#[derive(Debug, Default)]
pub(crate) struct CompactionCache(Mutex<Option<(i64, Option<Timestamp>)>>);

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

    /// Reads the layout and each entity's fan-out in force now (a slab group's among
    /// them), with which `super::keying::key_batch` keys every message it has to key,
    /// and `super::keying::key_slabs` the `slabs`: nothing when there is none, and why
    /// every one of them is to be retried when the layout cannot be read. `layout` is
    /// the one the rates were measured and the messages packed under, when it was read:
    /// the keys are made under the same one.
    pub(super) async fn load_keying(
        &self,
        packed: &Packed,
        slabs: &[Shared<UnkeyedSlab>],
        layout: Option<TableHistory>,
        cx: &BatchContext<'_>,
    ) -> KeyingState {
        if !packed.to_key() && slabs.is_empty() {
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
        let mut entities = packed.entities();
        entities.extend(slabs.iter().map(|s| s.write.place.entity.as_str()));
        let fanouts = self.fanouts(entities, now, cx.work_deadline).await;
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

impl<T: BatchTable, S: ShardStore, Q: Queue, L: RollupTable> Ingest<T, S, Q, L> {
    /// Whether this invocation writes slabs, and by what clock: only where `layout` was
    /// read and writes slabs in some epoch, with a rollups table, whose compaction
    /// progress this container reads at most once every [`COMPACTION_REFRESH`] (every
    /// [`NO_PROGRESS_REFRESH`] while there is none). When the read fails, the last one
    /// read stands whatever its age (an older progress only makes the lag look longer);
    /// with none, no slab is written.
    pub(super) async fn slab_clock(
        &self,
        layout: Option<&TableHistory>,
        cx: &BatchContext<'_>,
    ) -> Option<SlabClock> {
        let rollups = self.rollups.as_ref()?;
        if !layout.is_some_and(writes_slabs) {
            return None;
        }
        let now = cx.now;
        let clock = |compacted_to| SlabClock { now, compacted_to };
        let cached = *self.compaction.0.lock();
        if let Some((at_ms, to)) = cached
            && now.as_millis().saturating_sub(at_ms) < refresh_ms(to)
        {
            return Some(clock(to));
        }
        match tokio::time::timeout_at(cx.work_deadline, read_compacted(rollups)).await {
            Ok(Ok(progress)) => {
                let to = progress.and_then(|p| Timestamp::from_millis(p.to_ms).ok());
                *self.compaction.0.lock() = Some((now.as_millis(), to));
                Some(clock(to))
            }
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the deadline came first".to_owned(),
                };
                tracing::warn!(%error, "the compaction progress could not be read");
                cached.map(|(_, to)| clock(to))
            }
        }
    }
}

/// How long a read of the compaction progress that found `to` stands.
fn refresh_ms(to: Option<Timestamp>) -> i64 {
    let refresh = if to.is_some() {
        COMPACTION_REFRESH
    } else {
        NO_PROGRESS_REFRESH
    };
    i64::try_from(refresh.as_millis()).unwrap_or(i64::MAX)
}
