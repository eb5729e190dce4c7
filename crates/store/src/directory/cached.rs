//! The one cache of the shard metadata table, for readers and writers alike: the
//! layout history, each entity's record and each hour of the hot index, each trusted
//! for one TTL from when it was read. Time comes in as a parameter (`now`), so the cache reads no
//! clock and tests drive it at any instant.
//!
//! Caching is safe for exact plans because every epoch takes effect later than any cache
//! can be stale (see `sharding::epoch`): a history at most one TTL old already holds
//! every epoch in force at any stored reading's timestamp. Fan-out keys nest, so a
//! cache that misses a raise keys or reads with a k whose keys are still read.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::ShardMeta;
use sharding::time::{TimeRange, Timestamp};

use super::ShardReader;
use super::hot::{self, EntityRecord};
use crate::error::StoreError;

/// Entity entries kept before the cache is cleared wholesale; bounds memory in a
/// long-lived function that sees many devices.
const MAX_CACHED_ENTITIES: usize = 100_000;

/// Hours of the hot index kept before they are cleared wholesale (a year of hours).
const MAX_CACHED_HOURS: usize = 8_760;

#[derive(Debug, Clone)]
struct Cached<T> {
    fetched_at: Timestamp,
    value: T,
}

#[derive(Debug, Default)]
struct Cache {
    layout: Option<Cached<TableHistory>>,
    entities: HashMap<String, Cached<Option<EntityRecord>>>,
    hours: HashMap<String, Cached<BTreeSet<String>>>,
    legacy: Option<Cached<BTreeSet<String>>>,
}

/// What one device's read plan is made from (`sharding::read_plan::plan_entity`).
#[derive(Debug, Clone)]
pub struct DeviceLayout {
    /// The table's layout history.
    pub table: TableHistory,
    /// The device's fan-out history.
    pub fanout: FanoutHistory,
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

    /// Whether a read at `fetched_at` is still trusted at `now`. A read stamped after
    /// `now` (a clock stepped back) is not.
    fn fresh<T>(&self, cached: &Cached<T>, now: Timestamp) -> bool {
        cached.fetched_at <= now && now < cached.fetched_at.saturating_add(self.ttl)
    }

    /// Forgets the cached metadata of `entity`.
    pub fn invalidate(&self, entity: &str) {
        self.cache.lock().entities.remove(entity);
    }

    /// Caches `value` as `entity`'s record read at `now`.
    pub(crate) fn remember(&self, entity: &str, now: Timestamp, value: Option<EntityRecord>) {
        let mut cache = self.cache.lock();
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
        self.cache.lock().layout = Some(Cached {
            fetched_at: now,
            value: history,
        });
    }

    /// Records in the cached copy of `entity` that it was marked busy at `at`.
    pub(crate) fn remember_hot_mark(&self, entity: &str, at: Timestamp) {
        if let Some(cached) = self.cache.lock().entities.get_mut(entity)
            && let Some(record) = cached.value.as_mut()
        {
            record.meta.last_hot = Some(at);
        }
    }

    /// Records in the cached copy of `entity` that the hot index lists it through
    /// `through` for the history changed at `last_updated`.
    pub(crate) fn remember_hot_through(
        &self,
        entity: &str,
        last_updated: Timestamp,
        through: Timestamp,
    ) {
        if let Some(cached) = self.cache.lock().entities.get_mut(entity)
            && let Some(record) = cached.value.as_mut()
            && record.meta.last_updated == last_updated
        {
            record.hot_through = Some(through);
        }
    }
}

impl<R> CachedDirectory<R> {
    /// `read` of the cached layout, if one was read within the TTL of `now`; never
    /// reads the store.
    fn peek_layout<T>(&self, now: Timestamp, read: impl FnOnce(&TableHistory) -> T) -> Option<T> {
        let cache = self.cache.lock();
        let cached = cache.layout.as_ref().filter(|c| self.fresh(c, now))?;
        Some(read(&cached.value))
    }

    /// `read` of `entity`'s cached record (`None` inside: it has none), if it was
    /// read within the TTL of `now`; never reads the store.
    pub(crate) fn peek_entity<T>(
        &self,
        entity: &str,
        now: Timestamp,
        read: impl FnOnce(Option<&EntityRecord>) -> T,
    ) -> Option<T> {
        let cache = self.cache.lock();
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
        self.peek_entity(entity, now, |record| {
            record
                .map(|r| r.meta.shard_history.clone())
                .unwrap_or_default()
        })
    }

    /// Whether the cache knows, freshly at `now`, that `entity` has no metadata; never
    /// reads the store.
    pub fn known_without_meta(&self, entity: &str, now: Timestamp) -> bool {
        self.peek_entity(entity, now, |record| record.is_none()) == Some(true)
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

    /// What one device's (entity's) read plan is made from, at `now`: the table's
    /// layout history, then the device's fan-out history (cached); `None`, with no
    /// fan-out read, while no layout is stored (nothing was written).
    pub async fn device_layout(
        &self,
        device: &str,
        now: Timestamp,
    ) -> Result<Option<DeviceLayout>, StoreError> {
        let Some(table) = self.stored_layout(now).await? else {
            return Ok(None);
        };
        let fanout = self.fanout(device, now).await?;
        Ok(Some(DeviceLayout { table, fanout }))
    }

    /// An entity's record (cached).
    pub async fn record(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<EntityRecord>, StoreError> {
        if let Some(record) = self.peek_entity(entity, now, |record| record.cloned()) {
            return Ok(record);
        }
        self.refresh_record(entity, now).await
    }

    /// An entity's record read from the table (not the cache), then cached.
    pub async fn refresh_record(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<EntityRecord>, StoreError> {
        let record = self.store.get_record(entity).await?;
        self.remember(entity, now, record.clone());
        Ok(record)
    }

    /// An entity's metadata (cached).
    pub async fn meta(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        Ok(self.record(entity, now).await?.map(|r| r.meta))
    }

    /// An entity's metadata read from the table (not the cache), then cached.
    pub async fn refresh(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        Ok(self.refresh_record(entity, now).await?.map(|r| r.meta))
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

    /// Every entity whose readings stamped in `range` can carry a raised key, with its
    /// fan-out history (cached): the entities the hot index lists in the hours of
    /// `range` and the legacy hot set, kept where their read fan-out within `range`
    /// exceeds 1. At most two batched reads per 100 hours and per 100 entities the
    /// cache does not hold, never one read per entity.
    pub async fn hot(
        &self,
        range: TimeRange,
        now: Timestamp,
    ) -> Result<Vec<(String, FanoutHistory)>, StoreError> {
        let mut names = BTreeSet::new();
        let mut missing = Vec::new();
        let legacy_cached = {
            let cache = self.cache.lock();
            for hour in hot::hours_of(range) {
                match cache.hours.get(&hour).filter(|c| self.fresh(c, now)) {
                    Some(cached) => names.extend(cached.value.iter().cloned()),
                    None => missing.push(hour),
                }
            }
            match cache.legacy.as_ref().filter(|c| self.fresh(c, now)) {
                Some(cached) => {
                    names.extend(cached.value.iter().cloned());
                    true
                }
                None => false,
            }
        };
        if !missing.is_empty() || !legacy_cached {
            let listing = self.store.hot_listing(&missing, !legacy_cached).await?;
            let mut cache = self.cache.lock();
            if cache.hours.len() + missing.len() > MAX_CACHED_HOURS {
                cache.hours.clear();
            }
            for hour in missing {
                let value = listing.hours.get(&hour).cloned().unwrap_or_default();
                names.extend(value.iter().cloned());
                cache.hours.insert(
                    hour,
                    Cached {
                        fetched_at: now,
                        value,
                    },
                );
            }
            if let Some(legacy) = listing.legacy {
                names.extend(legacy.iter().cloned());
                cache.legacy = Some(Cached {
                    fetched_at: now,
                    value: legacy,
                });
            }
        }
        let records = self.records(names, now).await?;
        Ok(records
            .into_iter()
            .filter(|(_, history)| hot::raised_within(history, range))
            .collect())
    }

    /// The fan-out histories of those of `names` with metadata: the cache's, and the
    /// rest in batched reads.
    async fn records(
        &self,
        names: BTreeSet<String>,
        now: Timestamp,
    ) -> Result<Vec<(String, FanoutHistory)>, StoreError> {
        let mut out = Vec::with_capacity(names.len());
        let mut missing = Vec::new();
        for name in names {
            match self.peek_entity(&name, now, |r| r.map(|r| r.meta.shard_history.clone())) {
                Some(Some(history)) => out.push((name, history)),
                Some(None) => {}
                None => missing.push(name),
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let mut found: HashMap<String, EntityRecord> = self
            .store
            .get_records(&missing)
            .await?
            .into_iter()
            .collect();
        for name in missing {
            let record = found.remove(&name);
            if let Some(record) = &record {
                out.push((name.clone(), record.meta.shard_history.clone()));
            }
            self.remember(&name, now, record);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
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
