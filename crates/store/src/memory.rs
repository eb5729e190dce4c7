//! In-memory fakes of the ports, with injectable faults, for handler and service tests.
//!
//! They behave like DynamoDB where the code under test depends on it: a batch naming a
//! key twice or holding an item over 400 KB is refused with a validation error, a
//! key-range throttle leaves the hot keys unprocessed and throttles the whole call when
//! nothing else is in it, conditional writes are atomic.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::ShardMeta;
use sharding::time::Timestamp;

use crate::batch::{BatchTable, Item, Key, MAX_BATCH_ITEMS, key_of};
use crate::directory::{ShardReader, ShardStore, UpdateCondition};
use crate::error::{StoreError, ThrottleKind};
use crate::size::{MAX_ITEM_BYTES, item_size};

mod queue;
mod readings;
pub use queue::MemoryQueue;
pub use readings::MemoryReadings;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not hide the state from the assertions after it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct TableState {
    items: BTreeMap<Key, Item>,
    calls: Vec<Vec<Key>>,
    unprocessed_fraction: f64,
    hot_pks: HashSet<String>,
    scripted: VecDeque<StoreError>,
    latency: Duration,
    in_flight: usize,
    most_in_flight: usize,
}

/// An in-memory readings table behind the [`BatchTable`] port. Cheap to clone; clones
/// share the table.
#[derive(Debug, Clone, Default)]
pub struct MemoryTable {
    state: Arc<Mutex<TableState>>,
}

impl MemoryTable {
    /// An empty table without faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Leaves `fraction` (0..=1, rounded down) of every call's items unprocessed, the
    /// last ones of the call, like a partition over its limit.
    pub fn set_unprocessed_fraction(&self, fraction: f64) {
        lock(&self.state).unprocessed_fraction = fraction.clamp(0.0, 1.0);
    }

    /// Throttles partition key `pk` for good: its items stay unprocessed, and a call
    /// holding nothing else fails with `TableWriteKeyRangeThroughputExceeded`.
    pub fn throttle_pk(&self, pk: impl Into<String>) {
        lock(&self.state).hot_pks.insert(pk.into());
    }

    /// Stops throttling every partition key.
    pub fn clear_throttles(&self) {
        lock(&self.state).hot_pks.clear();
    }

    /// The next calls fail with these errors, in order, before touching any item.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = StoreError>) {
        lock(&self.state).scripted.extend(errors);
    }

    /// Every call waits this long before answering.
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state).latency = latency;
    }

    /// The stored items, by key.
    pub fn items(&self) -> BTreeMap<Key, Item> {
        lock(&self.state).items.clone()
    }

    /// The most calls that were in progress at once.
    pub fn most_in_flight(&self) -> usize {
        lock(&self.state).most_in_flight
    }

    /// The keys of every call so far, in call order.
    pub fn calls(&self) -> Vec<Vec<Key>> {
        lock(&self.state).calls.clone()
    }

    fn apply(&self, items: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let mut state = lock(&self.state);
        let mut keys = Vec::with_capacity(items.len());
        for item in &items {
            keys.push(key_of(item).map_err(StoreError::Validation)?);
        }
        state.calls.push(keys.clone());
        if let Some(err) = state.scripted.pop_front() {
            return Err(err);
        }
        if items.is_empty() || items.len() > MAX_BATCH_ITEMS {
            return Err(StoreError::Validation(format!(
                "a batch holds 1 to {MAX_BATCH_ITEMS} requests, not {}",
                items.len()
            )));
        }
        if keys.iter().collect::<HashSet<_>>().len() != keys.len() {
            return Err(StoreError::Validation(
                "Provided list of item keys contains duplicates".to_owned(),
            ));
        }
        if let Some(size) = items.iter().map(item_size).find(|s| *s > MAX_ITEM_BYTES) {
            return Err(StoreError::Validation(format!(
                "Item size {size} has exceeded the maximum allowed size"
            )));
        }
        let (hot, cold): (Vec<_>, Vec<_>) = items
            .into_iter()
            .zip(keys)
            .partition(|(_, key)| state.hot_pks.contains(&key.pk));
        if cold.is_empty() {
            return Err(StoreError::Throttled {
                kind: ThrottleKind::KeyRange,
                reason: "TableWriteKeyRangeThroughputExceeded".to_owned(),
            });
        }
        // Truncation is the intent: "rounded down" keeps a single item writable.
        let deferred = (cold.len() as f64 * state.unprocessed_fraction).floor() as usize;
        let accepted = cold.len() - deferred.min(cold.len());
        let mut unprocessed: Vec<Item> = hot.into_iter().map(|(item, _)| item).collect();
        for (n, (item, key)) in cold.into_iter().enumerate() {
            if n < accepted {
                state.items.insert(key, item);
            } else {
                unprocessed.push(item);
            }
        }
        Ok(unprocessed)
    }
}

impl BatchTable for MemoryTable {
    async fn batch_write(&self, items: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let latency = {
            let mut state = lock(&self.state);
            state.in_flight += 1;
            state.most_in_flight = state.most_in_flight.max(state.in_flight);
            state.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let answer = self.apply(items);
        lock(&self.state).in_flight -= 1;
        answer
    }
}

#[derive(Debug, Default)]
struct ShardState {
    entities: HashMap<String, ShardMeta>,
    layout: Option<TableHistory>,
    hot: BTreeSet<String>,
    changes: Vec<(String, ShardMeta)>,
    entity_reads: u64,
    reads: u64,
}

/// An in-memory shard metadata table behind the [`ShardStore`] port. Cheap to clone;
/// clones share the table.
#[derive(Debug, Clone, Default)]
pub struct MemoryShards {
    state: Arc<Mutex<ShardState>>,
}

impl MemoryShards {
    /// An empty metadata table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores an entity's metadata as it is (test setup), in the hot set when its
    /// fan-out ever exceeded 1, as a writer's raise leaves it.
    pub fn put_entity(&self, entity: &str, meta: ShardMeta) {
        let mut state = lock(&self.state);
        if meta.shard_history.ever_fanned_out() {
            state.hot.insert(entity.to_owned());
        }
        state.entities.insert(entity.to_owned(), meta);
    }

    /// Stores an entity whose metadata is just `history` (test setup for readers): k is
    /// its latest epoch's, and no change or busy mark was ever recorded.
    pub fn put_history(&self, entity: &str, history: FanoutHistory) {
        let meta = ShardMeta {
            number_of_shards: history.latest().map_or(1, |epoch| epoch.value),
            last_updated: Timestamp::MIN,
            shard_history: history,
            last_hot: None,
        };
        self.put_entity(entity, meta);
    }

    /// The stored layout history.
    pub fn layout(&self) -> Option<TableHistory> {
        lock(&self.state).layout.clone()
    }

    /// Stores the table's layout history as it is (test setup).
    pub fn put_layout(&self, history: TableHistory) {
        lock(&self.state).layout = Some(history);
    }

    /// An entity's stored metadata.
    pub fn entity(&self, entity: &str) -> Option<ShardMeta> {
        lock(&self.state).entities.get(entity).cloned()
    }

    /// The conditional updates that won, in order: the entity and the item written.
    pub fn changes(&self) -> Vec<(String, ShardMeta)> {
        lock(&self.state).changes.clone()
    }

    /// How many entity reads reached the table (the cache's misses).
    pub fn entity_reads(&self) -> u64 {
        lock(&self.state).entity_reads
    }

    /// How many reads of any kind (entity, layout, hot set) reached the table.
    pub fn reads(&self) -> u64 {
        lock(&self.state).reads
    }
}

impl ShardReader for MemoryShards {
    async fn get_entity(&self, entity: &str) -> Result<Option<ShardMeta>, StoreError> {
        let mut state = lock(&self.state);
        state.entity_reads += 1;
        state.reads += 1;
        Ok(state.entities.get(entity).cloned())
    }

    async fn get_layout(&self) -> Result<Option<TableHistory>, StoreError> {
        let mut state = lock(&self.state);
        state.reads += 1;
        Ok(state.layout.clone())
    }

    async fn hot_entities(&self) -> Result<BTreeSet<String>, StoreError> {
        let mut state = lock(&self.state);
        state.reads += 1;
        Ok(state.hot.clone())
    }
}

impl ShardStore for MemoryShards {
    async fn create_entity(&self, entity: &str, meta: &ShardMeta) -> Result<bool, StoreError> {
        let mut state = lock(&self.state);
        if state.entities.contains_key(entity) {
            return Ok(false);
        }
        state.entities.insert(entity.to_owned(), meta.clone());
        Ok(true)
    }

    async fn update_entity(
        &self,
        entity: &str,
        condition: &UpdateCondition,
        meta: &ShardMeta,
    ) -> Result<bool, StoreError> {
        let mut state = lock(&self.state);
        if meta.shard_history.ever_fanned_out() {
            state.hot.insert(entity.to_owned());
        }
        let Some(stored) = state.entities.get_mut(entity) else {
            return Ok(false);
        };
        let quiet = condition
            .quiet_since
            .is_none_or(|since| stored.last_hot.is_none_or(|hot| hot < since));
        if stored.last_updated != condition.last_updated || !quiet {
            return Ok(false);
        }
        let last_hot = meta.last_hot.or(stored.last_hot);
        *stored = ShardMeta {
            last_hot,
            ..meta.clone()
        };
        state.changes.push((entity.to_owned(), meta.clone()));
        Ok(true)
    }

    async fn mark_hot(&self, entity: &str, at: Timestamp) -> Result<(), StoreError> {
        if let Some(stored) = lock(&self.state).entities.get_mut(entity)
            && stored.last_hot.is_none_or(|hot| hot < at)
        {
            stored.last_hot = Some(at);
        }
        Ok(())
    }

    async fn create_layout(&self, history: &TableHistory) -> Result<bool, StoreError> {
        let mut state = lock(&self.state);
        if state.layout.is_some() {
            return Ok(false);
        }
        state.layout = Some(history.clone());
        Ok(true)
    }
}
