//! In-memory fakes of the ports, with injectable faults, for handler and service tests.
//!
//! They behave like DynamoDB where the code under test depends on it: a batch naming a
//! key twice or holding an item over 400 KB is refused with a validation error, a
//! key-range throttle leaves the hot keys unprocessed and throttles the whole call when
//! nothing else is in it, conditional writes are atomic.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::ShardMeta;
use sharding::key::ItemKey;
use sharding::time::Timestamp;

use crate::batch::{BatchTable, Item, MAX_BATCH_ITEMS};
use crate::directory::hot::{self, EntityRecord, HotListing};
use crate::directory::{ShardReader, ShardStore, UpdateCondition};
use crate::error::{StoreError, ThrottleKind};
use crate::item::{PK, SK};
use crate::size::{MAX_ITEM_BYTES, item_size};
use crate::written::Written;

mod queue;
mod readings;
mod rollups;
mod scan;
pub use queue::MemoryQueue;
pub use readings::MemoryReadings;
pub use rollups::MemoryRollups;
pub use scan::MemoryScan;

/// The key of `item`, read as DynamoDB reads it: `PK` and `SK`, non-empty strings.
fn item_key(item: &Item) -> Result<ItemKey, StoreError> {
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) if !s.is_empty() => Ok(s.clone()),
        Some(AttributeValue::S(_)) => Err(format!("key attribute {name} is empty")),
        Some(_) => Err(format!("key attribute {name} is not a string")),
        None => Err(format!("key attribute {name} is missing")),
    };
    Ok(ItemKey {
        pk: string(PK).map_err(StoreError::Validation)?,
        sk: string(SK).map_err(StoreError::Validation)?,
    })
}

#[derive(Debug, Default)]
struct TableState {
    items: BTreeMap<ItemKey, Item>,
    calls: Vec<Vec<ItemKey>>,
    unprocessed_fraction: f64,
    hot_pks: HashSet<String>,
    scripted: VecDeque<StoreError>,
    lost: VecDeque<StoreError>,
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
        self.state.lock().unprocessed_fraction = fraction.clamp(0.0, 1.0);
    }

    /// Throttles partition key `pk` for good: its items stay unprocessed, and a call
    /// holding nothing else fails with `TableWriteKeyRangeThroughputExceeded`.
    pub fn throttle_pk(&self, pk: impl Into<String>) {
        self.state.lock().hot_pks.insert(pk.into());
    }

    /// The next calls fail with these errors, in order, before touching any item.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = StoreError>) {
        self.state.lock().scripted.extend(errors);
    }

    /// The next calls that reach the items apply their writes, then fail with these
    /// errors, in order: an answer lost after DynamoDB applied the write.
    pub fn lose_next_answers(&self, errors: impl IntoIterator<Item = StoreError>) {
        self.state.lock().lost.extend(errors);
    }

    /// Every call waits this long before answering.
    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().latency = latency;
    }

    /// The stored items, by key.
    pub fn items(&self) -> BTreeMap<ItemKey, Item> {
        self.state.lock().items.clone()
    }

    /// The most calls that were in progress at once.
    pub fn most_in_flight(&self) -> usize {
        self.state.lock().most_in_flight
    }

    /// The keys of every call so far, in call order.
    pub fn calls(&self) -> Vec<Vec<ItemKey>> {
        self.state.lock().calls.clone()
    }

    fn apply(&self, items: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let mut state = self.state.lock();
        let mut keys = Vec::with_capacity(items.len());
        for item in &items {
            keys.push(item_key(item)?);
        }
        state.calls.push(keys.clone());
        if let Some(err) = state.scripted.pop_front() {
            return Err(err);
        }
        refuse_batch(&items, &keys)?;
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
        if let Some(err) = state.lost.pop_front() {
            return Err(err);
        }
        Ok(unprocessed)
    }
}

/// What DynamoDB refuses of a `BatchWriteItem` of `items` (their `keys`): none or more
/// than 25, a key twice, an item over 400 KB.
pub(crate) fn refuse_batch(items: &[Item], keys: &[ItemKey]) -> Result<(), StoreError> {
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
    Ok(())
}

impl BatchTable for MemoryTable {
    async fn batch_write(&self, items: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let latency = {
            let mut state = self.state.lock();
            state.in_flight += 1;
            state.most_in_flight = state.most_in_flight.max(state.in_flight);
            state.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let answer = self.apply(items);
        self.state.lock().in_flight -= 1;
        answer
    }
}

/// How far around an entity's latest change [`MemoryShards::put_entity`] lists it.
pub const SETUP_LISTING_WINDOW: Duration = Duration::from_secs(7 * 86_400);

/// Most keys one `BatchGetItem` takes.
pub const MAX_BATCH_GET_KEYS: usize = 100;

/// The size DynamoDB would give a hot index item of these entities (its key, the
/// string set, the expiry): a listing past 400 KB fails as it would there.
fn hot_item_size(label: &str, entities: &BTreeSet<String>) -> usize {
    let key = "PK".len() + "hot#".len() + label.len();
    let set = "entities".len() + entities.iter().map(String::len).sum::<usize>();
    key + set + "ttl".len() + 21
}

#[derive(Debug, Default)]
struct HotItem {
    entities: BTreeSet<String>,
    expires_at: Option<Timestamp>,
}

#[derive(Debug, Default)]
struct ShardState {
    entities: HashMap<String, EntityRecord>,
    layout: Option<TableHistory>,
    hot: BTreeMap<String, HotItem>,
    legacy: BTreeSet<String>,
    changes: Vec<(String, ShardMeta)>,
    entity_reads: u64,
    reads: u64,
}

/// An in-memory shard metadata table behind the [`ShardStore`] port. Cheap to clone;
/// clones share the table. Like DynamoDB, a batched read takes at most
/// [`MAX_BATCH_GET_KEYS`] keys, and a hot index item at most 400 KB.
#[derive(Debug, Clone, Default)]
pub struct MemoryShards {
    state: Arc<Mutex<ShardState>>,
}

impl MemoryShards {
    /// An empty metadata table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores an entity's metadata as it is (test setup), listed in the hot index as
    /// writers keying its readings up to [`SETUP_LISTING_WINDOW`] around its latest
    /// change leave it (a device: never a slab group, [`hot::lists`]).
    pub fn put_entity(&self, entity: &str, meta: ShardMeta) {
        let mut state = self.state.lock();
        let history = &meta.shard_history;
        let hot_through = history
            .latest()
            .filter(|_| history.ever_fanned_out() && hot::lists(entity))
            .map(|latest| {
                let from = latest
                    .effective_from
                    .checked_sub(SETUP_LISTING_WINDOW)
                    .unwrap_or(Timestamp::MIN);
                let through = hot::listing_end(latest.effective_from, SETUP_LISTING_WINDOW);
                for hour in hot::raised_hours(history, from, through) {
                    let item = state.hot.entry(hour.label).or_default();
                    item.entities.insert(entity.to_owned());
                }
                through
            });
        state
            .entities
            .insert(entity.to_owned(), EntityRecord { meta, hot_through });
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

    /// Stores an entity as a table from before the hot index holds it (test setup): no
    /// listing, and named in the legacy one-item hot set when it ever fanned out.
    pub fn put_legacy_entity(&self, entity: &str, meta: ShardMeta) {
        let mut state = self.state.lock();
        if meta.shard_history.ever_fanned_out() {
            state.legacy.insert(entity.to_owned());
        }
        state
            .entities
            .insert(entity.to_owned(), EntityRecord::unlisted(meta));
    }

    /// The stored layout history.
    pub fn layout(&self) -> Option<TableHistory> {
        self.state.lock().layout.clone()
    }

    /// Stores the table's layout history as it is (test setup).
    pub fn put_layout(&self, history: TableHistory) {
        self.state.lock().layout = Some(history);
    }

    /// An entity's stored metadata.
    pub fn entity(&self, entity: &str) -> Option<ShardMeta> {
        self.state
            .lock()
            .entities
            .get(entity)
            .map(|r| r.meta.clone())
    }

    /// An entity's stored record.
    pub fn record(&self, entity: &str) -> Option<EntityRecord> {
        self.state.lock().entities.get(entity).cloned()
    }

    /// The entities the hot index lists in hour `label`, and the item's expiry.
    pub fn hot_hour(&self, label: &str) -> Option<(BTreeSet<String>, Option<Timestamp>)> {
        self.state
            .lock()
            .hot
            .get(label)
            .map(|item| (item.entities.clone(), item.expires_at))
    }

    /// Every entity the hot index lists in any hour (test assertions).
    pub async fn hot_entities(&self) -> Result<BTreeSet<String>, StoreError> {
        let state = self.state.lock();
        Ok(state
            .hot
            .values()
            .flat_map(|item| item.entities.iter().cloned())
            .collect())
    }

    /// The conditional updates that won, in order: the entity and the item written.
    pub fn changes(&self) -> Vec<(String, ShardMeta)> {
        self.state.lock().changes.clone()
    }

    /// How many entity reads reached the table (the cache's misses), batched or not.
    pub fn entity_reads(&self) -> u64 {
        self.state.lock().entity_reads
    }

    /// How many read calls of any kind (entity, layout, batched reads) reached the table.
    pub fn reads(&self) -> u64 {
        self.state.lock().reads
    }
}

impl ShardReader for MemoryShards {
    async fn get_record(&self, entity: &str) -> Result<Option<EntityRecord>, StoreError> {
        let mut state = self.state.lock();
        state.entity_reads += 1;
        state.reads += 1;
        Ok(state.entities.get(entity).cloned())
    }

    async fn get_records(
        &self,
        entities: &[String],
    ) -> Result<Vec<(String, EntityRecord)>, StoreError> {
        let mut state = self.state.lock();
        let mut out = Vec::new();
        for chunk in entities.chunks(MAX_BATCH_GET_KEYS) {
            state.reads += 1;
            state.entity_reads += chunk.len() as u64;
            out.extend(
                chunk
                    .iter()
                    .filter_map(|e| state.entities.get(e).map(|r| (e.clone(), r.clone()))),
            );
        }
        Ok(out)
    }

    async fn get_layout(&self) -> Result<Option<TableHistory>, StoreError> {
        let mut state = self.state.lock();
        state.reads += 1;
        Ok(state.layout.clone())
    }

    async fn hot_listing(&self, hours: &[String], legacy: bool) -> Result<HotListing, StoreError> {
        let mut state = self.state.lock();
        let keys = hours.len() + usize::from(legacy);
        state.reads += keys.div_ceil(MAX_BATCH_GET_KEYS) as u64;
        let listed = hours
            .iter()
            .filter_map(|h| {
                state
                    .hot
                    .get(h)
                    .map(|item| (h.clone(), item.entities.clone()))
            })
            .collect();
        Ok(HotListing {
            hours: listed,
            legacy: legacy.then(|| state.legacy.clone()),
        })
    }
}

impl ShardStore for MemoryShards {
    async fn create_entity(&self, entity: &str, meta: &ShardMeta) -> Result<Written, StoreError> {
        let mut state = self.state.lock();
        if state.entities.contains_key(entity) {
            return Ok(Written::Refused);
        }
        state
            .entities
            .insert(entity.to_owned(), EntityRecord::unlisted(meta.clone()));
        Ok(Written::Applied)
    }

    async fn update_record(
        &self,
        entity: &str,
        condition: &UpdateCondition,
        meta: &ShardMeta,
        hot_through: Option<Timestamp>,
    ) -> Result<Written, StoreError> {
        let mut state = self.state.lock();
        let Some(stored) = state.entities.get_mut(entity) else {
            return Ok(Written::Refused);
        };
        let quiet = condition
            .quiet_since
            .is_none_or(|since| stored.meta.last_hot.is_none_or(|hot| hot < since));
        if stored.meta.last_updated != condition.last_updated || !quiet {
            return Ok(Written::Refused);
        }
        let last_hot = meta.last_hot.or(stored.meta.last_hot);
        stored.meta = ShardMeta {
            last_hot,
            ..meta.clone()
        };
        if hot_through.is_some() {
            stored.hot_through = hot_through;
        }
        state.changes.push((entity.to_owned(), meta.clone()));
        Ok(Written::Applied)
    }

    async fn list_hot(
        &self,
        entity: &str,
        hours: &[String],
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let mut state = self.state.lock();
        for hour in hours {
            let item = state.hot.entry(hour.clone()).or_default();
            if !item.entities.contains(entity) {
                let mut grown = item.entities.clone();
                grown.insert(entity.to_owned());
                let size = hot_item_size(hour, &grown);
                if size > MAX_ITEM_BYTES {
                    return Err(StoreError::Validation(format!(
                        "Item size to update has exceeded the maximum allowed size ({size} bytes)"
                    )));
                }
                item.entities = grown;
            }
            if expires_at.is_some() {
                item.expires_at = expires_at;
            }
        }
        Ok(())
    }

    async fn extend_hot(
        &self,
        entity: &str,
        last_updated: Timestamp,
        through: Timestamp,
    ) -> Result<Written, StoreError> {
        let mut state = self.state.lock();
        match state.entities.get_mut(entity) {
            Some(stored)
                if stored.meta.last_updated == last_updated
                    && stored.hot_through.is_none_or(|w| w < through) =>
            {
                stored.hot_through = Some(through);
                Ok(Written::Applied)
            }
            _ => Ok(Written::Refused),
        }
    }

    async fn mark_hot(&self, entity: &str, at: Timestamp) -> Result<(), StoreError> {
        if let Some(stored) = self.state.lock().entities.get_mut(entity)
            && stored.meta.last_hot.is_none_or(|hot| hot < at)
        {
            stored.meta.last_hot = Some(at);
        }
        Ok(())
    }

    async fn create_layout(&self, history: &TableHistory) -> Result<Written, StoreError> {
        let mut state = self.state.lock();
        if state.layout.is_some() {
            return Ok(Written::Refused);
        }
        state.layout = Some(history.clone());
        Ok(Written::Applied)
    }

    async fn replace_layout(
        &self,
        expected_epochs: usize,
        history: &TableHistory,
    ) -> Result<Written, StoreError> {
        let mut state = self.state.lock();
        match &state.layout {
            Some(stored) if stored.epochs().len() == expected_epochs => {
                state.layout = Some(history.clone());
                Ok(Written::Applied)
            }
            _ => Ok(Written::Refused),
        }
    }
}
