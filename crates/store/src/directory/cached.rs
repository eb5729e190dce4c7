//! The one cache of the shard metadata table, for readers and writers alike: the
//! layout history, each entity's metadata and the hot entities, each trusted for one TTL
//! from when it was read. Time comes in as a parameter (`now`), so the cache reads no
//! clock and tests drive it at any instant.
//!
//! Caching is safe for exact plans because every epoch takes effect later than any cache
//! can be stale (see `sharding::epoch`): a history at most one TTL old already holds
//! every epoch in force at any stored reading's timestamp. Fan-out keys nest, so a
//! cache that misses a raise keys or reads with a k whose keys are still read.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::ShardMeta;
use sharding::time::Timestamp;

use super::ShardReader;
use crate::error::StoreError;

/// Entity entries kept before the cache is cleared wholesale; bounds memory in a
/// long-lived function that sees many devices.
const MAX_CACHED_ENTITIES: usize = 100_000;

#[derive(Debug, Clone)]
struct Cached<T> {
    fetched_at: Timestamp,
    value: T,
}

#[derive(Debug, Default)]
struct Cache {
    layout: Option<Cached<TableHistory>>,
    entities: HashMap<String, Cached<Option<ShardMeta>>>,
    hot: Option<Cached<Vec<(String, FanoutHistory)>>>,
}

/// Cached reads of the shard metadata table.
#[derive(Debug)]
pub struct CachedDirectory<R> {
    store: R,
    ttl: Duration,
    cache: Mutex<Cache>,
}

impl<R> CachedDirectory<R> {
    /// A directory over `store` with an empty cache whose reads are trusted for `ttl`.
    pub fn new(store: R, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The port this directory reads.
    pub fn store(&self) -> &R {
        &self.store
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        // The cache holds plain data; a panic elsewhere cannot leave it inconsistent.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a read at `fetched_at` is still trusted at `now`. A read stamped after
    /// `now` (a clock stepped back) is not.
    fn fresh<T>(&self, cached: &Cached<T>, now: Timestamp) -> bool {
        cached.fetched_at <= now && now < cached.fetched_at.saturating_add(self.ttl)
    }

    /// Forgets the cached metadata of `entity`.
    pub fn invalidate(&self, entity: &str) {
        self.lock().entities.remove(entity);
    }

    /// Caches `value` as `entity`'s metadata read at `now`.
    pub(crate) fn remember(&self, entity: &str, now: Timestamp, value: Option<ShardMeta>) {
        let mut cache = self.lock();
        if cache.entities.len() >= MAX_CACHED_ENTITIES {
            cache.entities.clear();
        }
        cache.entities.insert(
            entity.to_owned(),
            Cached {
                fetched_at: now,
                value,
            },
        );
    }

    /// Caches `history` as the layout read at `now`.
    pub(crate) fn remember_layout(&self, now: Timestamp, history: TableHistory) {
        self.lock().layout = Some(Cached {
            fetched_at: now,
            value: history,
        });
    }

    /// Records in the cached copy of `entity` that it was marked busy at `at`.
    pub(crate) fn remember_hot_mark(&self, entity: &str, at: Timestamp) {
        if let Some(cached) = self.lock().entities.get_mut(entity)
            && let Some(meta) = cached.value.as_mut()
        {
            meta.last_hot = Some(at);
        }
    }
}

impl<R> CachedDirectory<R> {
    /// `read` of the cached layout, if one was read within the TTL of `now`; never
    /// reads the store.
    fn peek_layout<T>(&self, now: Timestamp, read: impl FnOnce(&TableHistory) -> T) -> Option<T> {
        let cache = self.lock();
        let cached = cache.layout.as_ref().filter(|c| self.fresh(c, now))?;
        Some(read(&cached.value))
    }

    /// `read` of `entity`'s cached metadata (`None` inside: it has none), if it was
    /// read within the TTL of `now`; never reads the store.
    fn peek_entity<T>(
        &self,
        entity: &str,
        now: Timestamp,
        read: impl FnOnce(Option<&ShardMeta>) -> T,
    ) -> Option<T> {
        let cache = self.lock();
        let cached = cache.entities.get(entity).filter(|c| self.fresh(c, now))?;
        Some(read(cached.value.as_ref()))
    }

    /// The fan-out of an entity without metadata under the cached layout in force at
    /// `now`, if the cache holds a fresh layout; never reads the store.
    pub fn cached_default_fanout(&self, now: Timestamp) -> Option<u32> {
        self.peek_layout(now, |history| history.at(now).default_fanout())
    }

    /// An entity's fan-out history if the cache holds a fresh read of it (empty when it
    /// has no metadata); never reads the store.
    pub fn cached_fanout(&self, entity: &str, now: Timestamp) -> Option<FanoutHistory> {
        self.peek_entity(entity, now, |meta| {
            meta.map(|m| m.shard_history.clone()).unwrap_or_default()
        })
    }

    /// Whether the cache knows, freshly at `now`, that `entity` has no metadata; never
    /// reads the store.
    pub fn known_without_meta(&self, entity: &str, now: Timestamp) -> bool {
        self.peek_entity(entity, now, |meta| meta.is_none()) == Some(true)
    }
}

impl<R: ShardReader> CachedDirectory<R> {
    /// The table's layout history, if one is stored. Only a stored layout is cached:
    /// the first one holds from the beginning of time, so a cached "none yet" would
    /// hide the first writes for a whole TTL.
    pub async fn stored_layout(&self, now: Timestamp) -> Result<Option<TableHistory>, StoreError> {
        if let Some(history) = self.peek_layout(now, TableHistory::clone) {
            return Ok(Some(history));
        }
        let history = self.store.get_layout().await?;
        if let Some(history) = &history {
            self.remember_layout(now, history.clone());
        }
        Ok(history)
    }

    /// An entity's metadata (cached).
    pub async fn meta(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        if let Some(meta) = self.peek_entity(entity, now, |meta| meta.cloned()) {
            return Ok(meta);
        }
        self.refresh(entity, now).await
    }

    /// An entity's metadata read from the table (not the cache), then cached.
    pub async fn refresh(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        let meta = self.store.get_entity(entity).await?;
        self.remember(entity, now, meta.clone());
        Ok(meta)
    }

    /// An entity's fan-out history (cached); empty when it has no metadata (the
    /// layout's default throughout).
    pub async fn fanout(&self, entity: &str, now: Timestamp) -> Result<FanoutHistory, StoreError> {
        Ok(self
            .meta(entity, now)
            .await?
            .map(|m| m.shard_history)
            .unwrap_or_default())
    }

    /// Every hot entity with its fan-out history (cached).
    pub async fn hot(&self, now: Timestamp) -> Result<Vec<(String, FanoutHistory)>, StoreError> {
        if let Some(cached) = self.lock().hot.as_ref()
            && self.fresh(cached, now)
        {
            return Ok(cached.value.clone());
        }
        let names = self.store.hot_entities().await?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let history = self.fanout(&name, now).await?;
            out.push((name, history));
        }
        self.lock().hot = Some(Cached {
            fetched_at: now,
            value: out.clone(),
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use sharding::layout::Layout;
    use sharding::time::Bucket;

    use super::*;
    use crate::memory::MemoryShards;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms).expect("in range")
    }

    #[tokio::test]
    async fn a_read_is_trusted_for_one_ttl_from_the_clock_passed_in() {
        let shards = MemoryShards::new();
        let directory = CachedDirectory::new(shards.clone(), Duration::from_secs(5));
        assert_eq!(directory.stored_layout(at(0)).await.expect("reads"), None);
        let layout = TableHistory::new(Layout::time_bucket(
            Bucket::Hour,
            NonZeroU32::new(4).expect("4 > 0"),
        ));
        shards.put_layout(layout.clone());
        // "None yet" was not cached: the first layout is seen at once.
        assert_eq!(
            directory.stored_layout(at(1)).await.expect("reads"),
            Some(layout.clone())
        );
        directory.fanout("dev-1", at(1_000)).await.expect("reads");
        let reads = shards.reads();
        // The layout was read at 1 ms, the entity at 1,000 ms.
        directory.stored_layout(at(5_000)).await.expect("reads");
        directory.fanout("dev-1", at(5_999)).await.expect("reads");
        assert_eq!(shards.reads(), reads, "within the TTL, from the cache");
        directory.fanout("dev-1", at(6_000)).await.expect("reads");
        directory.stored_layout(at(5_001)).await.expect("reads");
        assert_eq!(shards.reads(), reads + 2, "after it, from the table");
        directory.fanout("dev-1", at(0)).await.expect("reads");
        assert_eq!(
            shards.reads(),
            reads + 3,
            "a clock stepped back reads again"
        );
    }
}
