//! An in-memory readings table with DynamoDB's Query semantics, a fake shard store,
//! and helpers to build a service over them.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use query::{CursorKey, QueryService, ServiceConfig};
use sharding::epoch::{Epoch, FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::error::StoreError;
use store::item::ReadingItem;
use store::memory::MemoryShards;
use store::read::{Page, PageKey, PageRequest, ReadingSource};

/// `2026-06-22T00:00:00.000Z`
pub const BASE_MS: i64 = 1_782_086_400_000;

pub fn key() -> CursorKey {
    CursorKey::new(b"test-cursor-key-0123456789abcdef".to_vec()).expect("long enough")
}

/// A readings table: items by (PK, SK), Query with BETWEEN, Limit, ScanIndexForward,
/// ExclusiveStartKey and a filter on ts_ms, LastEvaluatedKey when the page stopped at
/// its limit (even if nothing follows, as DynamoDB does), and an optional cap on items
/// per page standing in for the 1 MB page size. With `time_index` set, Query reads the
/// time index (a partition by `ts_ms`, the range as key condition); items sharing one
/// millisecond come in descending SK order (ascending when read backwards), i.e. NOT in
/// the merge's (ts, device, event) order, so the merge's tie handling is exercised.
#[derive(Debug, Default)]
pub struct FakeTable {
    items: Mutex<BTreeMap<(String, String), ReadingItem>>,
    page_cap: Option<u32>,
    pub calls: AtomicU64,
    pub evaluated: AtomicU64,
    throttle: Mutex<bool>,
}

impl FakeTable {
    pub fn new(page_cap: Option<u32>) -> Self {
        Self {
            page_cap,
            ..Self::default()
        }
    }

    pub fn put(&self, item: ReadingItem) {
        self.items
            .lock()
            .unwrap()
            .insert((item.pk.clone(), item.sk.clone()), item);
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// One page of a Query on the time index.
    fn index_page(&self, r: &PageRequest) -> Page {
        assert!(r.sk_between.is_none(), "the index has no SK condition");
        // Index order: ts ascending, ties by SK descending (see the type's doc).
        let order = |i: &ReadingItem| (i.ts_ms, std::cmp::Reverse(i.sk.clone()));
        let items = self.items.lock().unwrap();
        let mut matching: Vec<&ReadingItem> = items
            .range((r.pk.clone(), String::new())..)
            .take_while(|((pk, _), _)| pk == &r.pk)
            .map(|(_, v)| v)
            .filter(|i| {
                r.ts_ms_between
                    .is_none_or(|(lo, hi)| lo <= i.ts_ms && i.ts_ms <= hi)
            })
            .collect();
        matching.sort_by_key(|i| order(i));
        if !r.ascending {
            matching.reverse();
        }
        if let Some(start) = &r.start_after {
            assert_eq!(start.pk, r.pk, "ExclusiveStartKey from another partition");
            let at = (
                start.ts_ms.expect("an index ExclusiveStartKey names ts_ms"),
                std::cmp::Reverse(start.sk.clone()),
            );
            matching.retain(|i| {
                if r.ascending {
                    order(i) > at
                } else {
                    order(i) < at
                }
            });
        }
        let cap = match (r.limit, self.page_cap) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        };
        if let Some(c) = cap {
            matching.truncate(c as usize);
        }
        let stopped = cap.is_some_and(|c| matching.len() == c as usize);
        let last_key = matching.last().filter(|_| stopped).map(|i| PageKey {
            pk: i.pk.clone(),
            sk: i.sk.clone(),
            ts_ms: Some(i.ts_ms),
        });
        self.evaluated
            .fetch_add(matching.len() as u64, Ordering::SeqCst);
        Page {
            items_read: matching.len() as u64,
            items: matching.into_iter().cloned().collect(),
            last_key,
        }
    }

    pub fn set_throttled(&self, on: bool) {
        *self.throttle.lock().unwrap() = on;
    }
}

impl ReadingSource for FakeTable {
    async fn query_page(&self, r: &PageRequest) -> Result<Page, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if *self.throttle.lock().unwrap() {
            return Err(StoreError::Throttled {
                kind: store::ThrottleKind::KeyRange,
                reason: "TableReadKeyRangeThroughputExceeded".into(),
            });
        }
        if r.time_index.is_some() {
            return Ok(self.index_page(r));
        }
        let items = self.items.lock().unwrap();
        let mut matching: Vec<&ReadingItem> = items
            .range((r.pk.clone(), String::new())..)
            .take_while(|((pk, _), _)| pk == &r.pk)
            .map(|(_, v)| v)
            .filter(|i| {
                r.sk_between
                    .as_ref()
                    .is_none_or(|(lo, hi)| lo <= &i.sk && &i.sk <= hi)
            })
            .collect();
        if !r.ascending {
            matching.reverse();
        }
        if let Some(start) = &r.start_after {
            assert_eq!(start.pk, r.pk, "ExclusiveStartKey from another partition");
            matching.retain(|i| {
                if r.ascending {
                    i.sk > start.sk
                } else {
                    i.sk < start.sk
                }
            });
        }
        let cap = match (r.limit, self.page_cap) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        };
        let evaluated: Vec<&ReadingItem> = match cap {
            Some(c) => matching.iter().take(c as usize).copied().collect(),
            None => matching.clone(),
        };
        let stopped = cap.is_some_and(|c| evaluated.len() == c as usize);
        let last_key = if stopped {
            evaluated.last().map(|i| PageKey {
                pk: i.pk.clone(),
                sk: i.sk.clone(),
                ts_ms: None,
            })
        } else {
            None
        };
        self.evaluated
            .fetch_add(evaluated.len() as u64, Ordering::SeqCst);
        let out = evaluated
            .iter()
            .filter(|i| {
                r.ts_ms_between
                    .is_none_or(|(lo, hi)| lo <= i.ts_ms && i.ts_ms <= hi)
            })
            .map(|i| (*i).clone())
            .collect();
        Ok(Page {
            items: out,
            last_key,
            items_read: evaluated.len() as u64,
        })
    }

    async fn get_reading(
        &self,
        key: &PageKey,
        _consistent: bool,
    ) -> Result<Option<ReadingItem>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self
            .items
            .lock()
            .unwrap()
            .get(&(key.pk.clone(), key.sk.clone()))
            .cloned())
    }
}

/// The shared in-memory shard metadata table with `layout` and each entity's fan-out
/// history (an entity that ever fanned out is in the hot set, as a raise leaves it).
pub fn shard_table(
    layout: TableHistory,
    entities: impl IntoIterator<Item = (String, FanoutHistory)>,
) -> MemoryShards {
    let shards = MemoryShards::new();
    shards.put_layout(layout);
    for (entity, history) in entities {
        shards.put_history(&entity, history);
    }
    shards
}

/// A reading as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct R {
    pub device: String,
    pub event: String,
    pub ts_ms: i64,
    pub value: f64,
}

/// Writes `readings` through `sharding::key::write_key` under the histories, each by a
/// writer at the reading's own time (keyed with the fan-out in force at its timestamp).
pub fn load(table: &FakeTable, shards: &MemoryShards, readings: &[R]) {
    let layout = shards.layout().expect("layout set");
    for r in readings {
        let fanout = shards
            .entity(&r.device)
            .map(|meta| meta.shard_history)
            .unwrap_or_default();
        let ts = Timestamp::from_millis(r.ts_ms).unwrap();
        let key = write_key(
            &ReadingRef {
                entity: &r.device,
                event_id: &r.event,
                ts,
                attribute: None,
            },
            &layout,
            &fanout,
            ts,
        )
        .unwrap();
        let reading = store::item::Reading {
            device_id: r.device.clone(),
            event_id: r.event.clone(),
            ts,
            metrics: BTreeMap::from([("temperature".to_string(), r.value)]),
            tags: BTreeMap::from([("site".to_string(), "lab".to_string())]),
        };
        table.put(ReadingItem::new(
            &reading,
            key,
            Duration::from_secs(86_400 * 365 * 100),
        ));
    }
}

pub fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

pub fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap()
}

pub fn table_history(epochs: Vec<(i64, Layout)>) -> TableHistory {
    let mut v = vec![];
    for (i, (at, layout)) in epochs.into_iter().enumerate() {
        v.push(Epoch {
            effective_from: if i == 0 { Timestamp::MIN } else { ts(at) },
            value: layout,
        });
    }
    TableHistory::from_epochs(v).unwrap()
}

pub fn fanout_history(epochs: Vec<(i64, u32)>) -> FanoutHistory {
    FanoutHistory::from_epochs(
        epochs
            .into_iter()
            .map(|(at, k)| Epoch {
                effective_from: ts(at),
                value: k,
            })
            .collect(),
    )
    .unwrap()
}

pub fn hourly(n: u32) -> Layout {
    Layout::time_bucket(Bucket::Hour, nz(n))
}

pub type Service<'a> = QueryService<&'a FakeTable, Arc<MemoryShards>>;

pub fn service(table: &FakeTable, shards: Arc<MemoryShards>) -> Service<'_> {
    service_with(table, shards, None)
}

/// A service reading over every device through the time index `time_index` (the fake
/// serves any index name as the time index).
pub fn service_with<'a>(
    table: &'a FakeTable,
    shards: Arc<MemoryShards>,
    time_index: Option<&str>,
) -> Service<'a> {
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    config.time_index = time_index.map(str::to_owned);
    QueryService::new(table, shards, config)
}

/// Calls the service and returns (status, JSON body).
pub async fn get(svc: &Service<'_>, path_and_query: &str) -> (u16, serde_json::Value) {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let resp = svc.handle_parts("GET", path, query).await;
    let status = resp.status().as_u16();
    let body = serde_json::from_str(resp.body()).expect("JSON body");
    (status, body)
}
