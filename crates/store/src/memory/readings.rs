//! [`MemoryReadings`]: the readings table behind the [`ReadingSource`] port, with
//! DynamoDB's Query semantics where the query service depends on them.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sharding::key::ItemKey;

use super::lock;
use crate::error::{StoreError, ThrottleKind};
use crate::item::ReadingItem;
use crate::read::{LastKey, Page, PageRequest, ReadingSource};

/// A readings table: items by (PK, SK).
///
/// A Query reads `SK BETWEEN` with `Limit`, `ScanIndexForward` and
/// `ExclusiveStartKey`, filters on `ts_ms` after the limit, and returns a
/// `LastEvaluatedKey` whenever the page stopped at its limit (even if nothing follows,
/// as DynamoDB does). An optional cap on items per page stands in for the 1 MB page size.
///
/// With [`PageRequest::time_index`] set, a Query reads the time index instead: a
/// partition ordered by `ts_ms`, the range as its key condition. Items sharing one
/// millisecond come in descending SK order (ascending when read backwards), which is
/// not the merge's (ts, device, event) order, so readers' tie handling is exercised.
#[derive(Debug, Default)]
pub struct MemoryReadings {
    items: Mutex<BTreeMap<(String, String), ReadingItem>>,
    page_cap: Option<u32>,
    calls: AtomicU64,
    evaluated: AtomicU64,
    throttled: AtomicBool,
    latency: Mutex<Duration>,
}

impl MemoryReadings {
    /// An empty table whose pages hold at most `page_cap` items (`None`: no cap).
    pub fn new(page_cap: Option<u32>) -> Self {
        Self {
            page_cap,
            ..Self::default()
        }
    }

    /// Stores an item, replacing one with the same key.
    pub fn put(&self, item: ReadingItem) {
        lock(&self.items).insert((item.pk.clone(), item.sk.clone()), item);
    }

    /// Calls made (Query pages and item reads).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Items evaluated by every Query so far (ScannedCount summed).
    pub fn evaluated(&self) -> u64 {
        self.evaluated.load(Ordering::SeqCst)
    }

    /// Every call waits this long before answering (a slow table).
    pub fn set_latency(&self, latency: Duration) {
        *lock(&self.latency) = latency;
    }

    async fn wait(&self) {
        let latency = *lock(&self.latency);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }

    /// While on, every call fails with a read key-range throttle.
    pub fn set_throttled(&self, on: bool) {
        self.throttled.store(on, Ordering::SeqCst);
    }

    /// The items a page of the request evaluates: its partition's, in the order the
    /// request reads them, after its `ExclusiveStartKey`, at most `cap` of them. Only
    /// those are copied, so a page of a large partition costs what it returns.
    fn evaluate(&self, r: &PageRequest, cap: Option<u32>) -> Result<Vec<ReadingItem>, StoreError> {
        let items = lock(&self.items);
        let partition = items
            .range((r.pk.clone(), String::new())..)
            .take_while(|((pk, _), _)| pk == &r.pk)
            .map(|(_, item)| item);
        let mut matching: Vec<&ReadingItem> = match (&r.time_index, &r.sk_between) {
            (Some(_), Some(_)) => {
                return Err(StoreError::Validation(
                    "the time index has no SK condition".to_owned(),
                ));
            }
            (Some(_), None) => partition.filter(|i| in_ts_range(r, i)).collect(),
            (None, Some((lo, hi))) => partition.filter(|i| lo <= &i.sk && &i.sk <= hi).collect(),
            (None, None) => partition.collect(),
        };
        if r.time_index.is_some() {
            matching.sort_by_key(|i| index_order(i));
        }
        if !r.ascending {
            matching.reverse();
        }
        if let Some(start) = &r.start_after {
            if start.key.pk != r.pk {
                return Err(StoreError::Validation(
                    "ExclusiveStartKey names another partition".to_owned(),
                ));
            }
            let index_start = match (&r.time_index, start.ts_ms) {
                (Some(_), Some(ts_ms)) => Some((ts_ms, Reverse(start.key.sk.clone()))),
                (Some(_), None) => {
                    return Err(StoreError::Validation(
                        "an index ExclusiveStartKey names ts_ms".to_owned(),
                    ));
                }
                (None, _) => None,
            };
            let after = |i: &&ReadingItem| match &index_start {
                Some(at) if r.ascending => index_order(i) > *at,
                Some(at) => index_order(i) < *at,
                None if r.ascending => i.sk > start.key.sk,
                None => i.sk < start.key.sk,
            };
            // Sorted in read order: what follows the key is a suffix.
            let skip = matching.partition_point(|i| !after(i));
            matching.drain(..skip);
        }
        if let Some(c) = cap {
            matching.truncate(c as usize);
        }
        Ok(matching.into_iter().cloned().collect())
    }
}

/// The time index's order: ts ascending, ties by SK descending.
fn index_order(item: &ReadingItem) -> (i64, Reverse<String>) {
    (item.ts_ms, Reverse(item.sk.clone()))
}

fn in_ts_range(r: &PageRequest, item: &ReadingItem) -> bool {
    r.ts_ms_between
        .is_none_or(|(lo, hi)| lo <= item.ts_ms && item.ts_ms <= hi)
}

impl ReadingSource for MemoryReadings {
    async fn query_page(&self, r: &PageRequest) -> Result<Page, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.wait().await;
        if self.throttled.load(Ordering::SeqCst) {
            return Err(StoreError::Throttled {
                kind: ThrottleKind::KeyRange,
                reason: "TableReadKeyRangeThroughputExceeded".into(),
            });
        }
        let cap = match (r.limit, self.page_cap) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        };
        let evaluated = self.evaluate(r, cap)?;
        let stopped = cap.is_some_and(|c| evaluated.len() == c as usize);
        let last_key = evaluated.last().filter(|_| stopped).map(|i| LastKey {
            key: i.key(),
            ts_ms: r.time_index.as_ref().map(|_| i.ts_ms),
        });
        let items_read = evaluated.len() as u64;
        self.evaluated.fetch_add(items_read, Ordering::SeqCst);
        // On the table, ts_ms is a filter, applied after the limit.
        let items = evaluated
            .into_iter()
            .filter(|i| in_ts_range(r, i))
            .collect();
        Ok(Page {
            items,
            last_key,
            items_read,
        })
    }

    async fn get_reading(
        &self,
        key: &ItemKey,
        _consistent: bool,
    ) -> Result<Option<ReadingItem>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.wait().await;
        Ok(lock(&self.items)
            .get(&(key.pk.clone(), key.sk.clone()))
            .cloned())
    }
}
