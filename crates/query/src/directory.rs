//! The read side's view of the shard directory: the table's layout history, one
//! entity's fan-out history and the hot entities with theirs, cached for a short TTL.
//!
//! Caching is safe for exact plans because every epoch takes effect later than any
//! cache can be stale (see `sharding::epoch`): a history at most one TTL old already
//! holds every epoch in force at any stored reading's timestamp.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sharding::epoch::{FanoutHistory, TableHistory};
use store::directory::ShardStore;
use store::error::StoreError;

#[derive(Debug, Default)]
struct Cache {
    layout: Option<(Instant, Option<TableHistory>)>,
    entities: HashMap<String, (Instant, FanoutHistory)>,
    hot: Option<(Instant, Vec<(String, FanoutHistory)>)>,
}

/// Cached reads of the shard metadata table.
#[derive(Debug)]
pub struct ReadDirectory<D> {
    store: D,
    ttl: Duration,
    cache: Mutex<Cache>,
}

/// Entity entries kept before the cache is cleared wholesale; bounds memory in a
/// long-lived Lambda that sees many devices.
const MAX_CACHED_ENTITIES: usize = 100_000;

impl<D: ShardStore> ReadDirectory<D> {
    pub fn new(store: D, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            cache: Mutex::new(Cache::default()),
        }
    }

    pub fn store(&self) -> &D {
        &self.store
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        // The cache holds plain data; a panic elsewhere cannot leave it inconsistent.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.ttl
    }

    /// The table's layout history; `None` when no layout was ever stored (nothing was
    /// written yet).
    pub async fn table(&self) -> Result<Option<TableHistory>, StoreError> {
        if let Some((at, t)) = &self.lock().layout
            && self.fresh(*at)
        {
            return Ok(t.clone());
        }
        let t = self.store.get_layout().await?;
        // Only a stored layout is reused: the first one holds from the beginning of
        // time, so a cached "none yet" would hide the first writes for a whole TTL.
        if t.is_some() {
            self.lock().layout = Some((Instant::now(), t.clone()));
        }
        Ok(t)
    }

    /// One entity's fan-out history (empty: the layout's default throughout).
    pub async fn fanout(&self, entity: &str) -> Result<FanoutHistory, StoreError> {
        if let Some((at, h)) = self.lock().entities.get(entity)
            && self.fresh(*at)
        {
            return Ok(h.clone());
        }
        let h = self
            .store
            .get_entity(entity)
            .await?
            .map(|m| m.shard_history)
            .unwrap_or_default();
        let mut cache = self.lock();
        if cache.entities.len() >= MAX_CACHED_ENTITIES {
            cache.entities.clear();
        }
        cache
            .entities
            .insert(entity.to_string(), (Instant::now(), h.clone()));
        Ok(h)
    }

    /// Every hot entity with its fan-out history.
    pub async fn hot(&self) -> Result<Vec<(String, FanoutHistory)>, StoreError> {
        if let Some((at, h)) = &self.lock().hot
            && self.fresh(*at)
        {
            return Ok(h.clone());
        }
        let names = self.store.hot_entities().await?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let h = self.fanout(&name).await?;
            out.push((name, h));
        }
        self.lock().hot = Some((Instant::now(), out.clone()));
        Ok(out)
    }
}
