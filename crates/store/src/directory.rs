//! The shard directory: layout and per-entity fan-out, cached, and every change of k.
//!
//! Writers key every reading with the layout and the entity's fan-out history, so both
//! are read often and change rarely: they are cached for `cache_ttl` (time comes in as
//! a parameter). Fan-out keys nest (`sharding::key`), so a cache that misses a raise
//! only keys with a smaller k that readers still read; the one change a cache must not
//! miss, a shrink, takes effect `propagation_margin` after it is written, and the margin
//! exceeds the TTL plus the largest accepted future skew.
//!
//! A key-range throttle is news the cache may not have: [`ShardDirectory::on_signal`]
//! re-reads the entity from the table before deciding, so every writer follows a raise
//! within one round trip of its first throttle. Changes are decided by
//! `sharding::fanout` and applied with a conditional update on `last_updated`: of any
//! number of writers racing on one entity, exactly one wins, and the losers refresh.
//!
//! `layout`, `meta` and `on_signal` run once or more per entity of every batch, so their
//! spans are at DEBUG: at INFO, the template's default log level, each would be a span
//! with formatted fields, hundreds per invocation for a batch of many devices.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use sharding::epoch::{FanoutHistory, REKEY_HORIZON, TableHistory};
use sharding::fanout::{
    self, FanoutDecision, FanoutPolicy, KeepReason, PlannedRaiseError, Raise, ShardMeta, Shrink,
    Signal, Throttle,
};
use sharding::layout::Layout;
use sharding::time::{TimeRange, Timestamp};

use crate::error::StoreError;
use crate::written::Written;

mod cached;
pub mod hot;
pub mod layout;
pub use cached::{CachedDirectory, DeviceLayout};
pub use hot::{EntityRecord, HOT_BUCKET, HotListing};

/// The conditions of an [`ShardStore::update_entity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateCondition {
    /// The item's `last_updated` must still equal this (no other change won since).
    pub last_updated: Timestamp,
    /// When set, the item's `last_hot` must be absent or earlier than this (no writer
    /// saw the entity busy since; a shrink's quiet period).
    pub quiet_since: Option<Timestamp>,
}

/// The read half of the port over the shard metadata table (schema in the crate docs):
/// all a reader needs, so a reader's fake writes nothing.
pub trait ShardReader: Send + Sync {
    /// An entity's metadata and hot listing, if it has any (a strongly consistent read).
    fn get_record(
        &self,
        entity: &str,
    ) -> impl Future<Output = Result<Option<EntityRecord>, StoreError>> + Send;

    /// An entity's metadata, if it has any (a strongly consistent read).
    fn get_entity(
        &self,
        entity: &str,
    ) -> impl Future<Output = Result<Option<ShardMeta>, StoreError>> + Send {
        async move { Ok(self.get_record(entity).await?.map(|r| r.meta)) }
    }

    /// The records of `entities` that have one, in as few calls as the table allows
    /// (`BatchGetItem`, 100 keys a call).
    fn get_records(
        &self,
        entities: &[String],
    ) -> impl Future<Output = Result<Vec<(String, EntityRecord)>, StoreError>> + Send;

    /// The table-level layout history, if stored.
    fn get_layout(&self) -> impl Future<Output = Result<Option<TableHistory>, StoreError>> + Send;

    /// The entities the hot index lists in each of `hours` (labels of [`HOT_BUCKET`]),
    /// and the legacy one-item hot set when `legacy`, in as few calls as the table
    /// allows (`BatchGetItem`, 100 keys a call).
    fn hot_listing(
        &self,
        hours: &[String],
        legacy: bool,
    ) -> impl Future<Output = Result<HotListing, StoreError>> + Send;
}

/// The port over the shard metadata table for writers: the reads, and every change.
pub trait ShardStore: ShardReader {
    /// Creates an entity's metadata unless it exists; [`Written::Refused`] if it did.
    fn create_entity(
        &self,
        entity: &str,
        meta: &ShardMeta,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// Replaces an entity's `number_of_shards`, `last_updated` and `shard_history` with
    /// `meta`'s, and its `hot_through` with `hot_through` when given, if `condition`
    /// holds; [`Written::Refused`] if it failed (another writer won, or a writer saw the
    /// entity busy).
    /// Lists nothing: the caller lists the hours the change alters first
    /// ([`hot::change_listing`]).
    fn update_record(
        &self,
        entity: &str,
        condition: &UpdateCondition,
        meta: &ShardMeta,
        hot_through: Option<Timestamp>,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// [`ShardStore::update_record`] after listing the entity in the hot index for the
    /// hours the change alters, through the hour after the hour after
    /// `meta.last_updated` (the decision), with items that never expire: for a change
    /// made without a directory. Reads the entity first.
    fn update_entity(
        &self,
        entity: &str,
        condition: &UpdateCondition,
        meta: &ShardMeta,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        async move {
            let stored = self.get_record(entity).await?;
            let decided = meta.last_updated;
            let end = hot::listing_end(decided, REKEY_HORIZON);
            let (hours, claim) =
                hot::change_listing(stored.as_ref(), &meta.shard_history, decided, end);
            self.list_hot(entity, &hot::labels(&hours), None).await?;
            self.update_record(entity, condition, meta, claim).await
        }
    }

    /// Adds `entity` to the hot index items of `hours`, created if missing, and sets
    /// their expiry to `expires_at` when given (a later expiry than any reading of those
    /// hours needs; `None` leaves it).
    fn list_hot(
        &self,
        entity: &str,
        hours: &[String],
        expires_at: Option<Timestamp>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Sets an existing entity's `hot_through` to `through` if its `last_updated` is
    /// still `last_updated` (the history the listing was made for) and its
    /// `hot_through` is absent or earlier; [`Written::Refused`] otherwise.
    fn extend_hot(
        &self,
        entity: &str,
        last_updated: Timestamp,
        through: Timestamp,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// Sets an existing entity's `last_hot` to `at` (a writer saw it busy). Touches
    /// nothing else, so it never fails another writer's change.
    fn mark_hot(
        &self,
        entity: &str,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Stores the layout history unless one exists; [`Written::Refused`] if it did.
    fn create_layout(
        &self,
        history: &TableHistory,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// Replaces the stored layout history with `history` if the stored one still has
    /// `expected_epochs` epochs (histories only grow, so no other writer changed it
    /// since it was read); [`Written::Refused`] otherwise.
    fn replace_layout(
        &self,
        expected_epochs: usize,
        history: &TableHistory,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;
}

impl<T: ShardReader> ShardReader for std::sync::Arc<T> {
    fn get_record(
        &self,
        entity: &str,
    ) -> impl Future<Output = Result<Option<EntityRecord>, StoreError>> + Send {
        (**self).get_record(entity)
    }
    fn get_records(
        &self,
        entities: &[String],
    ) -> impl Future<Output = Result<Vec<(String, EntityRecord)>, StoreError>> + Send {
        (**self).get_records(entities)
    }
    fn get_layout(&self) -> impl Future<Output = Result<Option<TableHistory>, StoreError>> + Send {
        (**self).get_layout()
    }
    fn hot_listing(
        &self,
        hours: &[String],
        legacy: bool,
    ) -> impl Future<Output = Result<HotListing, StoreError>> + Send {
        (**self).hot_listing(hours, legacy)
    }
}

impl<T: ShardStore> ShardStore for std::sync::Arc<T> {
    fn create_entity(
        &self,
        entity: &str,
        meta: &ShardMeta,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).create_entity(entity, meta)
    }
    fn update_record(
        &self,
        entity: &str,
        condition: &UpdateCondition,
        meta: &ShardMeta,
        hot_through: Option<Timestamp>,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).update_record(entity, condition, meta, hot_through)
    }
    fn list_hot(
        &self,
        entity: &str,
        hours: &[String],
        expires_at: Option<Timestamp>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).list_hot(entity, hours, expires_at)
    }
    fn extend_hot(
        &self,
        entity: &str,
        last_updated: Timestamp,
        through: Timestamp,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).extend_hot(entity, last_updated, through)
    }
    fn mark_hot(
        &self,
        entity: &str,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).mark_hot(entity, at)
    }
    fn create_layout(
        &self,
        history: &TableHistory,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).create_layout(history)
    }
    fn replace_layout(
        &self,
        expected_epochs: usize,
        history: &TableHistory,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).replace_layout(expected_epochs, history)
    }
}

/// Tuning of the directory.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectoryConfig {
    /// How long a read of the metadata table is trusted (`SHARD_CACHE_TTL_SECS`).
    pub cache_ttl: Duration,
    /// Cooldown, jitter, maximum, key rate, quiet period and propagation margin.
    pub policy: FanoutPolicy,
    /// The layout stored when the table has none yet (from the configuration).
    pub initial_layout: Layout,
    /// How long readings are kept (`RETENTION_DAYS`): the hot index's items expire that
    /// long (plus the re-keying horizon) after their hour, and a writer's first listing
    /// of an entity raised before the index reaches no further back.
    pub retention: Duration,
}

/// What [`ShardDirectory::on_signal`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FanoutChange {
    /// Created the entity's metadata at the layout's default and left it there
    /// (`false`: another writer had just created it).
    Created {
        /// Whether this writer's conditional put won.
        won: bool,
    },
    /// Left k alone.
    Kept(KeepReason),
    /// This writer's raise won; in force at once.
    Raised(Raise),
    /// This writer's shrink won; in force after the propagation margin.
    Shrunk(Shrink),
    /// Another writer changed the entity first; the cache is refreshed.
    LostRace,
}

/// What [`ShardDirectory::plan_fanout`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedFanout {
    /// The raise is written, in force at once.
    Scheduled(Raise),
    /// The fan-out in force is already at least the one asked for.
    Already {
        /// That k.
        k: u32,
    },
}

/// Why [`ShardDirectory::plan_fanout`] did not raise the fan-out.
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
    /// Writers changed the entity's fan-out at every attempt.
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

/// Failed attempts of a writer's hot listing against racing changes of the entity.
const LIST_ATTEMPTS: u32 = 3;

/// Most hours one step of a writer's hot listing adds: a listing that starts long ago
/// (an entity raised before the index) stores its progress after each step.
const LIST_STEP_HOURS: usize = 96;

/// How often one writer marks an entity busy, as a share of the quiet period: a mark
/// costs a write, and a quiet period only needs one mark inside it.
const HOT_MARK_SHARE: u32 = 8;

/// The writers' view of the shard directory: the one cache ([`CachedDirectory`]) plus
/// every change of k; see the module docs.
#[derive(Debug)]
pub struct ShardDirectory<S> {
    cache: CachedDirectory<S>,
    config: DirectoryConfig,
}

impl<S: ShardStore> ShardDirectory<S> {
    /// A directory over `store` with an empty cache.
    pub fn new(store: S, config: DirectoryConfig) -> Self {
        Self {
            cache: CachedDirectory::new(store, config.cache_ttl),
            config,
        }
    }

    /// The port this directory reads.
    pub fn store(&self) -> &S {
        self.cache.store()
    }

    /// The configuration.
    pub fn config(&self) -> &DirectoryConfig {
        &self.config
    }

    /// The table's layout history; stores the configured layout, in force from the
    /// beginning of time, when the table has none.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn layout(&self, now: Timestamp) -> Result<TableHistory, StoreError> {
        if let Some(history) = self.cache.stored_layout(now).await? {
            return Ok(history);
        }
        let initial = TableHistory::new(self.config.initial_layout.clone());
        let history = if self.store().create_layout(&initial).await? == Written::Applied {
            tracing::info!(layout = %self.config.initial_layout, "stored the initial layout");
            initial
        } else {
            self.store().get_layout().await?.ok_or_else(|| {
                StoreError::Malformed("layout item vanished after a conflicting create".to_owned())
            })?
        };
        self.cache.remember_layout(now, history.clone());
        Ok(history)
    }

    /// The fan-out of an entity without metadata under the layout in force at `now`
    /// (1 for time buckets, N for random and calculated).
    async fn default_fanout(&self, now: Timestamp) -> Result<u32, StoreError> {
        Ok(self.layout(now).await?.at(now).default_fanout())
    }

    /// An entity's metadata (cached).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn meta(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        self.cache.meta(entity, now).await
    }

    /// An entity's metadata read from the table (not the cache), then cached.
    pub async fn refresh(
        &self,
        entity: &str,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        self.cache.refresh(entity, now).await
    }

    /// An entity's fan-out history (cached) for keying readings at `now`; empty when it
    /// has no metadata. When the history can raise a key of a reading a writer may key
    /// at `now` (stamped up to the propagation margin ahead), the hot index lists the
    /// entity for those hours first ([`hot`]): once an hour per raised entity, and
    /// not at all for one that is not.
    pub async fn fanout(&self, entity: &str, now: Timestamp) -> Result<FanoutHistory, StoreError> {
        let mut record = self.cache.record(entity, now).await?;
        let mut failed = 0;
        loop {
            let Some(current) = record.as_mut() else {
                return Ok(FanoutHistory::default());
            };
            let Some((hours, through)) = self.listing_step(entity, current, now) else {
                return Ok(current.meta.shard_history.clone());
            };
            let expires = hot::expiry(through, self.config.retention);
            self.store()
                .list_hot(entity, &hot::labels(&hours), Some(expires))
                .await?;
            let last_updated = current.meta.last_updated;
            let extended = self
                .store()
                .extend_hot(entity, last_updated, through)
                .await?;
            if extended == Written::Applied {
                current.hot_through = Some(through);
                self.cache
                    .remember_hot_through(entity, last_updated, through);
                continue;
            }
            // A change won since the read (its own listing holds for its history), or
            // another writer listed further: read again and list what is left.
            failed += 1;
            if failed >= LIST_ATTEMPTS {
                return Err(StoreError::Transient(format!(
                    "the hot listing of {entity} changed at each of {LIST_ATTEMPTS} attempts"
                )));
            }
            record = self.cache.refresh_record(entity, now).await?;
        }
    }

    /// An entity's fan-out history if the cache holds a fresh read of it and the hot
    /// index already lists it as far as a writer at `now` needs; `None` when
    /// [`Self::fanout`] must call the store. No call and no future.
    pub fn fanout_cached(&self, entity: &str, now: Timestamp) -> Option<FanoutHistory> {
        self.cache.peek_entity(entity, now, |record| match record {
            None => Some(FanoutHistory::default()),
            Some(r) if self.listing_step(entity, r, now).is_none() => {
                Some(r.meta.shard_history.clone())
            }
            Some(_) => None,
        })?
    }

    /// The next hours a writer at `now` lists for `entity`'s `record` before keying,
    /// and the `hot_through` they complete; `None` when the listing is complete, or the
    /// index lists no such entity ([`hot::lists`]).
    fn listing_step(
        &self,
        entity: &str,
        record: &EntityRecord,
        now: Timestamp,
    ) -> Option<(Vec<hot::HotHour>, Timestamp)> {
        let history = &record.meta.shard_history;
        if !history.ever_fanned_out() || !hot::lists(entity) {
            return None;
        }
        let end = hot::listing_end(now, self.config.policy.propagation_margin);
        let from = match record.hot_through {
            Some(through) if through >= end => return None,
            Some(through) => through,
            // Never listed (raised before the index): as far back as a reading is kept.
            None => now
                .checked_sub(self.config.retention.saturating_add(REKEY_HORIZON))
                .unwrap_or(Timestamp::MIN),
        };
        let mut hours = hot::raised_hours(history, from, end);
        if hours.is_empty() {
            return None;
        }
        let through = match hours.get(LIST_STEP_HOURS) {
            Some(next) => next.start,
            None => end,
        };
        hours.truncate(LIST_STEP_HOURS);
        Some((hours, through))
    }

    /// Every entity whose readings stamped in `range` can carry a raised key, with its
    /// fan-out history (cached; see [`CachedDirectory::hot`]).
    pub async fn hot(
        &self,
        range: TimeRange,
        now: Timestamp,
    ) -> Result<Vec<(String, FanoutHistory)>, StoreError> {
        self.cache.hot(range, now).await
    }

    /// Forgets the cached metadata of `entity`.
    pub fn invalidate(&self, entity: &str) {
        self.cache.invalidate(entity);
    }

    fn remember(&self, entity: &str, now: Timestamp, value: Option<EntityRecord>) {
        self.cache.remember(entity, now, value);
    }

    /// Raises `entity`'s fan-out to `k` ahead of its load (an operator's plan): creates
    /// its metadata if missing, then raises k with `sharding::fanout::planned_raise`, in
    /// force at once. Reads the store, not the cache, and retries when a writer's change
    /// wins the conditional update first.
    #[tracing::instrument(skip(self))]
    pub async fn plan_fanout(
        &self,
        entity: &str,
        k: u32,
        now: Timestamp,
    ) -> Result<PlannedFanout, PlanFanoutError> {
        let default = self.default_fanout(now).await?;
        for _ in 0..PLAN_ATTEMPTS {
            let Some(meta) = self.existing_or_created(entity, default, now).await? else {
                continue;
            };
            let planned = fanout::planned_raise(&meta, k, now, default, &self.config.policy)
                .map_err(|source| PlanFanoutError::Refused {
                    entity: entity.to_owned(),
                    k,
                    source,
                })?;
            let Some(raise) = planned else {
                let k = meta.in_force(now, default);
                return Ok(PlannedFanout::Already { k });
            };
            if self.apply_raise(entity, &meta, &raise, now).await? == Written::Applied {
                return Ok(PlannedFanout::Scheduled(raise));
            }
        }
        Err(PlanFanoutError::Contended {
            entity: entity.to_owned(),
            attempts: PLAN_ATTEMPTS,
        })
    }

    /// The stored metadata of `entity`, or the item this writer created for it (k =
    /// `default`, no history); `None` if another writer created it first.
    async fn existing_or_created(
        &self,
        entity: &str,
        default: u32,
        now: Timestamp,
    ) -> Result<Option<ShardMeta>, StoreError> {
        if let Some(meta) = self.store().get_entity(entity).await? {
            return Ok(Some(meta));
        }
        let created = ShardMeta {
            number_of_shards: default,
            ..ShardMeta::initial(now)
        };
        if self.store().create_entity(entity, &created).await? == Written::Applied {
            self.remember(entity, now, Some(EntityRecord::unlisted(created.clone())));
            Ok(Some(created))
        } else {
            self.invalidate(entity);
            Ok(None)
        }
    }

    /// Brings what a writer saw of `entity` to its fan-out: raises k when
    /// `sharding::fanout::decide` says so, marks the entity busy when it is, and shrinks
    /// k when `sharding::fanout::decide_shrink` says it stayed quiet long enough.
    ///
    /// A key-range throttle re-reads the entity from the table first (another writer may
    /// have raised it already) and creates its metadata when missing, then decides on
    /// the item it created, in the same call. A signal without a throttle creates
    /// nothing unless its rate needs more than the layout's default.
    #[tracing::instrument(level = "debug", skip(self, rng))]
    pub async fn on_signal<R: Rng + ?Sized>(
        &self,
        entity: &str,
        signal: Signal,
        now: Timestamp,
        rng: &mut R,
    ) -> Result<FanoutChange, StoreError> {
        let policy = &self.config.policy;
        let default = self.default_fanout(now).await?;
        let throttled = signal.throttle == Throttle::KeyRange;
        let stored = if throttled {
            self.refresh(entity, now).await?
        } else {
            self.meta(entity, now).await?
        };
        let (meta, created) = match stored {
            Some(meta) => (meta, false),
            None => match self.enough_without_metadata(&signal, default) {
                Some(kept) => return Ok(kept),
                None => match self.existing_or_created(entity, default, now).await? {
                    Some(meta) => (meta, true),
                    None => return Ok(FanoutChange::Created { won: false }),
                },
            },
        };
        match fanout::decide(Some(&meta), &signal, now, default, policy, rng) {
            FanoutDecision::Raise(raise) => {
                match self.apply_raise(entity, &meta, &raise, now).await? {
                    Written::Applied => Ok(FanoutChange::Raised(raise)),
                    Written::Refused => Ok(FanoutChange::LostRace),
                }
            }
            // Unreachable: `decide` only asks to create when there is no item.
            FanoutDecision::Create { .. } => Ok(FanoutChange::LostRace),
            FanoutDecision::Keep { .. } if created => Ok(FanoutChange::Created { won: true }),
            FanoutDecision::Keep { reason } => self
                .busy_or_quiet(entity, &meta, &signal, now, default)
                .await
                .map(|shrunk| shrunk.unwrap_or(FanoutChange::Kept(reason))),
        }
    }

    /// What [`Self::on_signal`] answers from the cache alone, without a call or a
    /// future: `Some` for a signal without a throttle about an entity the cache freshly
    /// knows has no metadata, and whose rate the default fan-out of the cached layout
    /// carries (most devices of a fleet, in most batches). `None` when the answer needs
    /// `on_signal`. A batch of hundreds of devices decides those in one pass.
    pub fn on_signal_cached(
        &self,
        entity: &str,
        signal: &Signal,
        now: Timestamp,
    ) -> Option<FanoutChange> {
        let default = self.cache.cached_default_fanout(now)?;
        if !self.cache.known_without_meta(entity, now) {
            return None;
        }
        self.enough_without_metadata(signal, default)
    }

    /// The answer for an entity without metadata that needs none: no throttle, and a
    /// rate the layout's default fan-out carries.
    fn enough_without_metadata(&self, signal: &Signal, default: u32) -> Option<FanoutChange> {
        let policy = &self.config.policy;
        let by_rate = signal.rate.map_or(1, |r| {
            fanout::needed_fanout(r, policy.key_rate, policy.max_fanout)
        });
        (signal.throttle != Throttle::KeyRange && by_rate <= default)
            .then_some(FanoutChange::Kept(KeepReason::Enough { current: default }))
    }

    /// An entity whose k stays: marked busy when the signal shows it is, else shrunk
    /// when it stayed quiet long enough (`Some` with what the shrink did).
    async fn busy_or_quiet(
        &self,
        entity: &str,
        meta: &ShardMeta,
        signal: &Signal,
        now: Timestamp,
        default: u32,
    ) -> Result<Option<FanoutChange>, StoreError> {
        let policy = &self.config.policy;
        let current = meta.in_force(now, default);
        let busy = signal.throttle == Throttle::KeyRange
            || signal
                .rate
                .is_some_and(|r| fanout::shows_heat(r, current, policy.key_rate));
        if busy {
            self.mark_hot(entity, meta, now).await;
            return Ok(None);
        }
        match fanout::decide_shrink(meta, signal.rate, now, default, policy) {
            Some(shrink) => self
                .apply_shrink(entity, meta, &shrink, now)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// Records that a writer saw `entity` busy, at most once per eighth of the quiet
    /// period per writer (a mark costs a write). A failed mark is logged and otherwise
    /// ignored: at worst the entity shrinks early and the next throttle raises it again.
    async fn mark_hot(&self, entity: &str, meta: &ShardMeta, now: Timestamp) {
        let every = self.config.policy.shrink_after / HOT_MARK_SHARE;
        if meta
            .last_hot
            .is_some_and(|at| at <= now && now < at.saturating_add(every))
        {
            return;
        }
        match self.store().mark_hot(entity, now).await {
            Ok(()) => self.cache.remember_hot_mark(entity, now),
            Err(err) => tracing::warn!(entity, error = %err, "could not mark the entity busy"),
        }
    }

    /// Writes the item after a change with the conditional update, after listing the
    /// hours the change alters in the hot index ([`hot::change_listing`]): a change that
    /// then loses its race leaves at most a listing a read plan finds nothing under. The
    /// winner caches the new item; a loser forgets its stale copy. [`Written::Applied`]
    /// if this writer won.
    async fn apply(
        &self,
        entity: &str,
        condition: UpdateCondition,
        next: ShardMeta,
        now: Timestamp,
    ) -> Result<Written, StoreError> {
        let cached = self
            .cache
            .peek_entity(entity, now, |r| r.cloned())
            .flatten();
        let stored = match cached {
            Some(record) if record.meta.last_updated == condition.last_updated => Some(record),
            _ => self.store().get_record(entity).await?,
        };
        let end = hot::listing_end(now, self.config.policy.propagation_margin);
        let (hours, claim) = hot::change_listing(stored.as_ref(), &next.shard_history, now, end);
        if let Some(last) = hours.last().filter(|_| hot::lists(entity)) {
            let expires = hot::expiry(HOT_BUCKET.next_start(last.start), self.config.retention);
            self.store()
                .list_hot(entity, &hot::labels(&hours), Some(expires))
                .await?;
        }
        let written = self
            .store()
            .update_record(entity, &condition, &next, claim)
            .await?;
        if written == Written::Refused {
            self.invalidate(entity);
            return Ok(written);
        }
        let record = EntityRecord {
            meta: next,
            hot_through: claim,
        };
        self.remember(entity, now, Some(record));
        Ok(written)
    }

    /// Writes `raise` of `entity` (currently `current`); the raised item is marked busy.
    async fn apply_raise(
        &self,
        entity: &str,
        current: &ShardMeta,
        raise: &Raise,
        now: Timestamp,
    ) -> Result<Written, StoreError> {
        let mut raised = current
            .raised(raise)
            .map_err(|e| StoreError::Malformed(format!("raise of {entity}: {e}")))?;
        raised.last_hot = Some(raise.effective_from);
        let condition = UpdateCondition {
            last_updated: raise.precondition_last_updated,
            quiet_since: None,
        };
        let written = self.apply(entity, condition, raised, now).await?;
        if written == Written::Applied {
            tracing::info!(entity, from = raise.from, to = raise.to, "raised fan-out");
        }
        Ok(written)
    }

    /// Writes `shrink` of `entity` (currently `current`), conditional on no writer having
    /// marked it busy during the quiet period.
    async fn apply_shrink(
        &self,
        entity: &str,
        current: &ShardMeta,
        shrink: &Shrink,
        now: Timestamp,
    ) -> Result<FanoutChange, StoreError> {
        let shrunk = current
            .shrunk(shrink)
            .map_err(|e| StoreError::Malformed(format!("shrink of {entity}: {e}")))?;
        let condition = UpdateCondition {
            last_updated: shrink.precondition_last_updated,
            quiet_since: Some(shrink.quiet_since),
        };
        match self.apply(entity, condition, shrunk, now).await? {
            Written::Applied => {
                tracing::info!(entity, from = shrink.from, to = shrink.to, effective_from = %shrink.effective_from, "shrinking fan-out");
                Ok(FanoutChange::Shrunk(*shrink))
            }
            Written::Refused => Ok(FanoutChange::LostRace),
        }
    }
}
