//! [`MemoryRollups`]: the rollups table behind the [`RollupTable`] port, stored as the
//! DynamoDB adapter stores it (`store::rollup::stored`: heads and chunks), its
//! conditions checked atomically (as DynamoDB's are), every row refused over
//! DynamoDB's 400 KB item limit by DynamoDB's size rule, with a count of calls and
//! injectable failures.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::StoreError;
use crate::rollup::stored::{Row, chunk_pk, is_chunk_pk, join, row_size, rows};
use crate::rollup::{RollupItem, RollupKey, RollupPage, RollupQuery, RollupTable};
use crate::size::MAX_ITEM_BYTES;
use crate::written::Written;

/// Most items one Query page returns (DynamoDB's 1 MB, by count here).
const PAGE_ITEMS: usize = 100;

#[derive(Debug, Default)]
struct State {
    rows: BTreeMap<(String, String), Row>,
    scripted: VecDeque<StoreError>,
    writes: u64,
    reads: u64,
}

impl State {
    /// The item of a stored head, its chunks joined.
    fn joined(&self, head: &Row) -> Result<RollupItem, StoreError> {
        let chunks: Vec<Row> = match &head.chunked {
            None => Vec::new(),
            Some((digest, _)) => {
                let pk = chunk_pk(&head.pk, &head.sk, digest);
                self.rows
                    .range((pk.clone(), String::new())..)
                    .take_while(|((p, _), _)| *p == pk)
                    .map(|(_, row)| row.clone())
                    .collect()
            }
        };
        join(head.clone(), &chunks)
    }
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

    /// Every stored derived item, by key, its chunks joined.
    pub fn items(&self) -> BTreeMap<RollupKey, RollupItem> {
        let state = self.state.lock();
        state
            .rows
            .iter()
            .filter(|((pk, _), _)| !is_chunk_pk(pk))
            // A head whose chunks do not join is a bug of the writer, never an item to
            // leave out of what a test compares.
            .map(|(key, row)| match state.joined(row) {
                Ok(item) => (item.key(), item),
                Err(e) => panic!("{}/{}: {e}", key.0, key.1),
            })
            .collect()
    }

    /// Every stored row (heads and chunks), by key: what DynamoDB would hold.
    pub fn rows(&self) -> BTreeMap<(String, String), Row> {
        self.state.lock().rows.clone()
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

    /// Writes `item`'s chunks, then its head if `keep` allows given the stored head's
    /// version, refusing any row over the item limit as DynamoDB does.
    fn write(
        &self,
        item: &RollupItem,
        keep: impl FnOnce(Option<u64>) -> bool,
    ) -> Result<Written, StoreError> {
        let (head, chunks) = rows(item);
        let mut state = self.state.lock();
        state.writes += 1;
        if let Some(e) = state.scripted.pop_front() {
            return Err(e);
        }
        for row in chunks.iter().chain([&head]) {
            let size = row_size(row);
            if size > MAX_ITEM_BYTES {
                return Err(StoreError::Validation(format!(
                    "Item size has exceeded the maximum allowed size: {}/{} is {size} bytes",
                    row.pk, row.sk
                )));
            }
        }
        for chunk in chunks {
            state
                .rows
                .insert((chunk.pk.clone(), chunk.sk.clone()), chunk);
        }
        let key = (head.pk.clone(), head.sk.clone());
        if !keep(state.rows.get(&key).and_then(|stored| stored.version)) {
            return Ok(Written::Refused);
        }
        state.rows.insert(key, head);
        Ok(Written::Applied)
    }
}

impl RollupTable for MemoryRollups {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.write(item, |stored| stored.is_none_or(|v| v < item.version))
    }

    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.write(item, |stored| stored == expected)
    }

    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        let k = (pk.to_owned(), sk.to_owned());
        let mut state = self.state.lock();
        state.writes += 1;
        if let Some(e) = state.scripted.pop_front() {
            return Err(e);
        }
        if state.rows.get(&k).and_then(|stored| stored.version) != Some(version) {
            return Ok(Written::Refused);
        }
        state.rows.remove(&k);
        Ok(Written::Applied)
    }

    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        self.write(item, |_| true).map(drop)
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
        match state.rows.get(&(pk.to_owned(), sk.to_owned())) {
            Some(head) => state.joined(head).map(Some),
            None => Ok(None),
        }
    }

    async fn query(&self, q: &RollupQuery) -> Result<RollupPage, StoreError> {
        let mut state = self.state.lock();
        state.reads += 1;
        if let Some(e) = state.scripted.pop_front() {
            return Err(e);
        }
        // As the adapter asks DynamoDB: a key range, or else a prefix (never both).
        let in_range = |sk: &str| match (&q.sk_between, &q.sk_prefix) {
            (Some((lo, hi)), _) => lo.as_str() <= sk && sk <= hi.as_str(),
            (None, Some(p)) => sk.starts_with(p.as_str()),
            (None, None) => true,
        };
        let past_start = |sk: &str| match &q.after {
            None => true,
            Some(after) if q.ascending => sk > after.as_str(),
            Some(after) => sk < after.as_str(),
        };
        let mut matching: Vec<&Row> = state
            .rows
            .range((q.pk.clone(), String::new())..)
            .take_while(|((pk, _), _)| *pk == q.pk)
            .map(|(_, row)| row)
            .filter(|row| in_range(&row.sk) && past_start(&row.sk))
            .collect();
        if !q.ascending {
            matching.reverse();
        }
        let most = q.limit.map_or(PAGE_ITEMS, |l| (l as usize).min(PAGE_ITEMS));
        let more = matching.len() > most;
        matching.truncate(most);
        let last_sk = more
            .then(|| matching.last().map(|row| row.sk.clone()))
            .flatten();
        let items = matching
            .iter()
            .map(|row| state.joined(row))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RollupPage {
            evaluated: items.len() as u64,
            items,
            last_sk,
        })
    }
}
