//! [`MemoryRollups`]: the rollups table behind the [`RollupTable`] port, its
//! conditions checked atomically (as DynamoDB's are), with a count of calls and
//! injectable failures.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::StoreError;
use crate::rollup::{RollupItem, RollupPage, RollupQuery, RollupTable};

/// Most items one Query page returns (DynamoDB's 1 MB, by count here).
const PAGE_ITEMS: usize = 100;

#[derive(Debug, Default)]
struct State {
    items: BTreeMap<(String, String), RollupItem>,
    scripted: VecDeque<StoreError>,
    writes: u64,
    reads: u64,
}

/// The rollups table in memory. Cheap to clone; clones share the table.
#[derive(Debug, Clone, Default)]
pub struct MemoryRollups {
    state: Arc<Mutex<State>>,
}

impl MemoryRollups {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every stored item, by key.
    pub fn items(&self) -> BTreeMap<(String, String), RollupItem> {
        self.state.lock().items.clone()
    }

    /// The next calls fail with these errors, one each, in order.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = StoreError>) {
        self.state.lock().scripted.extend(errors);
    }

    /// Writes (puts and deletes, attempted) so far.
    pub fn writes(&self) -> u64 {
        self.state.lock().writes
    }

    /// Reads (gets and Query pages) so far.
    pub fn reads(&self) -> u64 {
        self.state.lock().reads
    }

    fn write(
        &self,
        f: impl FnOnce(&mut BTreeMap<(String, String), RollupItem>) -> bool,
    ) -> Result<bool, StoreError> {
        let mut state = self.state.lock();
        state.writes += 1;
        if let Some(e) = state.scripted.pop_front() {
            return Err(e);
        }
        Ok(f(&mut state.items))
    }
}

fn key(item: &RollupItem) -> (String, String) {
    (item.pk.clone(), item.sk.clone())
}

impl RollupTable for MemoryRollups {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<bool, StoreError> {
        self.write(|items| {
            if items
                .get(&key(item))
                .is_some_and(|stored| stored.version >= item.version)
            {
                return false;
            }
            items.insert(key(item), item.clone());
            true
        })
    }

    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<bool, StoreError> {
        self.write(|items| {
            if items.get(&key(item)).map(|stored| stored.version) != expected {
                return false;
            }
            items.insert(key(item), item.clone());
            true
        })
    }

    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<bool, StoreError> {
        let k = (pk.to_owned(), sk.to_owned());
        self.write(|items| {
            if items.get(&k).map(|stored| stored.version) != Some(version) {
                return false;
            }
            items.remove(&k);
            true
        })
    }

    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        self.write(|items| {
            items.insert(key(item), item.clone());
            true
        })
        .map(drop)
    }

    async fn get(
        &self,
        pk: &str,
        sk: &str,
        _consistent: bool,
    ) -> Result<Option<RollupItem>, StoreError> {
        let mut state = self.state.lock();
        state.reads += 1;
        if let Some(e) = state.scripted.pop_front() {
            return Err(e);
        }
        Ok(state.items.get(&(pk.to_owned(), sk.to_owned())).cloned())
    }

    async fn query(&self, q: &RollupQuery) -> Result<RollupPage, StoreError> {
        let mut state = self.state.lock();
        state.reads += 1;
        if let Some(e) = state.scripted.pop_front() {
            return Err(e);
        }
        let in_range = |sk: &str| {
            q.sk_between
                .as_ref()
                .is_none_or(|(lo, hi)| lo.as_str() <= sk && sk <= hi.as_str())
                && q.sk_prefix
                    .as_ref()
                    .is_none_or(|p| sk.starts_with(p.as_str()))
        };
        let past_start = |sk: &str| match &q.after {
            None => true,
            Some(after) if q.ascending => sk > after.as_str(),
            Some(after) => sk < after.as_str(),
        };
        let mut matching: Vec<&RollupItem> = state
            .items
            .range((q.pk.clone(), String::new())..)
            .take_while(|((pk, _), _)| *pk == q.pk)
            .map(|(_, item)| item)
            .filter(|item| in_range(&item.sk) && past_start(&item.sk))
            .collect();
        if !q.ascending {
            matching.reverse();
        }
        let most = q.limit.map_or(PAGE_ITEMS, |l| (l as usize).min(PAGE_ITEMS));
        let more = matching.len() > most;
        matching.truncate(most);
        let last_sk = more
            .then(|| matching.last().map(|i| i.sk.clone()))
            .flatten();
        Ok(RollupPage {
            evaluated: matching.len() as u64,
            items: matching.into_iter().cloned().collect(),
            last_sk,
        })
    }
}
