//! The shard directory: layout and per-entity fan-out, cached, and the fan-out raise.
//!
//! Writers key every reading with the layout and the entity's fan-out history, so both
//! are read often and change rarely: they are cached for `cache_ttl` (time comes in as
//! a parameter). The cache TTL is part of the epoch invariant: a change takes effect
//! `propagation_margin` after it is written, and the margin exceeds the TTL plus the
//! largest accepted future skew, so a cached history is never missing an epoch that
//! governs a reading this writer accepts.
//!
//! A raise is decided by `sharding::fanout::decide` and applied with a conditional
//! update on `last_updated`: of any number of writers racing on one entity, exactly one
//! wins per cooldown, and the losers only refresh their cache.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::{
    self, FanoutDecision, FanoutPolicy, KeepReason, PlannedRaiseError, Raise, ShardMeta, Throttle,
};
use sharding::layout::Layout;
use sharding::time::Timestamp;

use crate::error::{StoreError, ThrottleKind};

/// The port over the shard metadata table (schema in the crate docs).
pub trait ShardStore: Send + Sync {
    /// An entity's metadata, if it has any.
    fn get_entity(
        &self,
        entity: &str,
    ) -> impl Future<Output = Result<Option<ShardMeta>, StoreError>> + Send;

    /// Creates an entity's metadata unless it exists; `false` if it did.
    fn create_entity(
        &self,
        entity: &str,
        meta: &ShardMeta,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Applies `raise` if the item's `last_updated` still equals
    /// `raise.precondition_last_updated`, appending to `shard_history` and adding the
    /// entity to the hot set; `false` if the condition failed (another writer won).
    fn raise_entity(
        &self,
        entity: &str,
        raise: &Raise,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The table-level layout history, if stored.
    fn get_layout(&self) -> impl Future<Output = Result<Option<TableHistory>, StoreError>> + Send;

    /// Stores the layout history unless one exists; `false` if it did.
    fn create_layout(
        &self,
        history: &TableHistory,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Every entity whose fan-out ever exceeded 1.
    fn hot_entities(&self) -> impl Future<Output = Result<BTreeSet<String>, StoreError>> + Send;
}

impl<T: ShardStore> ShardStore for std::sync::Arc<T> {
    fn get_entity(
        &self,
        entity: &str,
    ) -> impl Future<Output = Result<Option<ShardMeta>, StoreError>> + Send {
        (**self).get_entity(entity)
    }
    fn create_entity(
        &self,
        entity: &str,
        meta: &ShardMeta,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).create_entity(entity, meta)
    }
    fn raise_entity(
        &self,
        entity: &str,
        raise: &Raise,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).raise_entity(entity, raise)
    }
    fn get_layout(&self) -> impl Future<Output = Result<Option<TableHistory>, StoreError>> + Send {
        (**self).get_layout()
    }
    fn create_layout(
        &self,
        history: &TableHistory,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).create_layout(history)
    }
    fn hot_entities(&self) -> impl Future<Output = Result<BTreeSet<String>, StoreError>> + Send {
        (**self).hot_entities()
    }
}

/// Tuning of the directory.
#[derive(Debug, Clone)]
pub struct DirectoryConfig {
    /// How long a read of the metadata table is trusted (`CACHE_TTL_SECS`).
    pub cache_ttl: Duration,
    /// Cooldown, jitter, maximum and propagation margin of raises.
    pub policy: FanoutPolicy,
    /// The layout stored when the table has none yet (from the configuration).
    pub initial_layout: Layout,
}

/// What [`ShardDirectory::on_throttle`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FanoutChange {
    /// Created the entity's metadata (`false`: another writer had just created it).
    Created {
        /// Whether this writer's conditional put won.
        won: bool,
    },
    /// Left k alone.
    Kept(KeepReason),
    /// This writer's conditional update won.
    Raised(Raise),
    /// Another writer changed the entity first; the cache is refreshed.
    LostRace,
}

/// What [`ShardDirectory::plan_fanout`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedFanout {
    /// The raise is written; it takes effect at `effective_from`.
    Scheduled(Raise),
    /// The latest scheduled k is already at least the one asked for.
    Already {
        /// That k.
        k: u32,
    },
}

/// Why [`ShardDirectory::plan_fanout`] did not schedule a fan-out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanFanoutError {
    /// The fan-out asked for cannot be scheduled.
    #[error("cannot schedule fan-out {k} for {entity}: {source}")]
    Refused {
        /// The entity.
        entity: String,
        /// The k asked for.
        k: u32,
        /// Why.
        #[source]
        source: PlannedRaiseError,
    },
    /// Writers raised the entity's fan-out at every attempt.
    #[error("writers changed the fan-out of {entity} at each of {attempts} attempts; try again")]
    Contended {
        /// The entity.
        entity: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The metadata table failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Attempts of [`ShardDirectory::plan_fanout`] against racing writers.
const PLAN_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone)]
struct Cached<T> {
    fetched_at: Timestamp,
    value: T,
}

/// Cached reads of the shard metadata plus the fan-out raise; see the module docs.
#[derive(Debug)]
pub struct ShardDirectory<S> {
    store: S,
    config: DirectoryConfig,
    entities: Mutex<HashMap<String, Cached<Option<ShardMeta>>>>,
    layout: Mutex<Option<Cached<TableHistory>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The cache holds no invariant a panic could break half-way.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<S: ShardStore> ShardDirectory<S> {
    /// A directory over `store` with an empty cache.
    pub fn new(store: S, config: DirectoryConfig) -> Self {
        Self {
            store,
            config,
            entities: Mutex::new(HashMap::new()),
            layout: Mutex::new(None),
        }
    }

    /// The port this directory reads.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &DirectoryConfig {
        &self.config
    }

    fn fresh(&self, fetched_at: Timestamp, now: Timestamp) -> bool {
        fetched_at <= now && now < fetched_at.saturating_add(self.config.cache_ttl)
    }

    /// The table's layout history; stores the configured layout, in force from the
    /// beginning of time, when the table has none.
    #[tracing::instrument(skip(self))]
    pub async fn layout(&self, now: Timestamp) -> Result<TableHistory, StoreError> {
        if let Some(cached) = lock(&self.layout).as_ref()
            && self.fresh(cached.fetched_at, now)
        {
            return Ok(cached.value.clone());
        }
        let history = match self.store.get_layout().await? {
            Some(history) => history,
            None => {
                let initial = TableHistory::new(self.config.initial_layout.clone());
                if self.store.create_layout(&initial).await? {
                    tracing::info!(layout = %self.config.initial_layout, "stored the initial layout");
                    initial
                } else {
                    self.store.get_layout().await?.ok_or_else(|| {
                        StoreError::Malformed(
                            "layout item vanished after a conflicting create".to_owned(),
                        )
                    })?
                }
            }
        };
        *lock(&self.layout) = Some(Cached {
            fetched_at: now,
            value: history.clone(),
        });
        Ok(history)
    }

    /// An entity's metadata (cached).
    #[tracing::instrument(skip(self))]
    pub async fn meta(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        if let Some(cached) = lock(&self.entities).get(entity)
            && self.fresh(cached.fetched_at, now)
        {
            return Ok(cached.value.clone());
        }
        let meta = self.store.get_entity(entity).await?;
        self.remember(entity, now, meta.clone());
        Ok(meta)
    }

    /// An entity's fan-out history (cached); empty when it has no metadata.
    pub async fn fanout(&self, entity: &str, now: Timestamp) -> Result<FanoutHistory, StoreError> {
        Ok(self
            .meta(entity, now)
            .await?
            .map(|m| m.shard_history)
            .unwrap_or_default())
    }

    /// Every entity whose fan-out ever exceeded 1 (not cached).
    pub async fn hot_entities(&self) -> Result<BTreeSet<String>, StoreError> {
        self.store.hot_entities().await
    }

    /// Forgets the cached metadata of `entity`.
    pub fn invalidate(&self, entity: &str) {
        lock(&self.entities).remove(entity);
    }

    fn remember(&self, entity: &str, now: Timestamp, value: Option<ShardMeta>) {
        lock(&self.entities).insert(
            entity.to_owned(),
            Cached {
                fetched_at: now,
                value,
            },
        );
    }

    /// Schedules fan-out `k` for `entity` ahead of its load (an operator's plan): creates
    /// its metadata if missing, then raises k with `sharding::fanout::planned_raise`,
    /// effective after the propagation margin. Reads the store, not the cache, and
    /// retries when a writer's raise wins the conditional update first.
    #[tracing::instrument(skip(self))]
    pub async fn plan_fanout(
        &self,
        entity: &str,
        k: u32,
        now: Timestamp,
    ) -> Result<PlannedFanout, PlanFanoutError> {
        for _ in 0..PLAN_ATTEMPTS {
            let meta = match self.store.get_entity(entity).await? {
                Some(meta) => meta,
                None => {
                    let default = self.layout(now).await?.latest().default_fanout();
                    let created = ShardMeta {
                        number_of_shards: default,
                        ..ShardMeta::initial(now)
                    };
                    if !self.store.create_entity(entity, &created).await? {
                        continue;
                    }
                    created
                }
            };
            let planned =
                fanout::planned_raise(&meta, k, now, &self.config.policy).map_err(|source| {
                    PlanFanoutError::Refused {
                        entity: entity.to_owned(),
                        k,
                        source,
                    }
                })?;
            let Some(raise) = planned else {
                let k = meta.number_of_shards;
                self.remember(entity, now, Some(meta));
                return Ok(PlannedFanout::Already { k });
            };
            if self.apply_raise(entity, &meta, &raise, now).await? {
                return Ok(PlannedFanout::Scheduled(raise));
            }
        }
        Err(PlanFanoutError::Contended {
            entity: entity.to_owned(),
            attempts: PLAN_ATTEMPTS,
        })
    }

    /// Reacts to a throttle on a write of `entity` keyed with fan-out `keyed`: creates
    /// its metadata if missing, raises its fan-out when `sharding::fanout::decide` says
    /// so. Only key-range throttles of writes keyed with the latest k ever raise.
    #[tracing::instrument(skip(self, rng))]
    pub async fn on_throttle<R: Rng + ?Sized>(
        &self,
        entity: &str,
        throttle: ThrottleKind,
        keyed: u32,
        now: Timestamp,
        rng: &mut R,
    ) -> Result<FanoutChange, StoreError> {
        let meta = self.meta(entity, now).await?;
        let throttle = match throttle {
            ThrottleKind::KeyRange => Throttle::KeyRange,
            ThrottleKind::Table => Throttle::Table,
            ThrottleKind::Other => Throttle::Other,
        };
        match fanout::decide(
            meta.as_ref(),
            throttle,
            keyed,
            now,
            &self.config.policy,
            rng,
        ) {
            FanoutDecision::Create { k } => {
                // Start at the layout's own default (1 for time buckets, N for random and
                // calculated), so creating the item never changes where keys go.
                let default = self.layout(now).await?.latest().default_fanout();
                let created = ShardMeta {
                    number_of_shards: k.max(default),
                    ..ShardMeta::initial(now)
                };
                let won = self.store.create_entity(entity, &created).await?;
                if won {
                    self.remember(entity, now, Some(created));
                } else {
                    self.invalidate(entity);
                }
                Ok(FanoutChange::Created { won })
            }
            FanoutDecision::Keep { reason } => Ok(FanoutChange::Kept(reason)),
            FanoutDecision::Raise(raise) => {
                let Some(current) = meta else {
                    return Ok(FanoutChange::LostRace);
                };
                if self.apply_raise(entity, &current, &raise, now).await? {
                    Ok(FanoutChange::Raised(raise))
                } else {
                    Ok(FanoutChange::LostRace)
                }
            }
        }
    }

    /// Writes `raise` of `entity` (currently `current`) with the conditional update.
    /// The winner caches the raised item; a loser forgets its stale copy. `true` if this
    /// writer won.
    async fn apply_raise(
        &self,
        entity: &str,
        current: &ShardMeta,
        raise: &Raise,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        if !self.store.raise_entity(entity, raise).await? {
            self.invalidate(entity);
            return Ok(false);
        }
        let raised = current
            .raised(raise)
            .map_err(|e| StoreError::Malformed(format!("raise of {entity}: {e}")))?;
        tracing::info!(entity, from = raise.from, to = raise.to, effective_from = %raise.effective_from, "raised fan-out");
        self.remember(entity, now, Some(raised));
        Ok(true)
    }
}
