//! [`MemoryReadings`]: the readings table behind the [`ReadingSource`] port, with
//! DynamoDB's Query semantics where the query service depends on them.

use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sharding::key::ItemKey;

use crate::batch::{BatchTable, Item};
use crate::block::BlockItem;
use crate::error::{StoreError, ThrottleKind};
use crate::item::ReadingItem;
use crate::read::{
    ItemsPage, ItemsRequest, LastKey, Page, PageRequest, ReadingSource, StoredItem, TS_MS,
    stored_key,
};
use crate::size::item_size;

/// The data one Query page reads at most: DynamoDB stops a page at 1 MB.
const PAGE_BYTES: usize = 1024 * 1024;

/// A read unit: a strongly consistent read of up to 4 KB (half of one when eventually
/// consistent).
const READ_UNIT_BYTES: usize = 4 * 1024;

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
///
/// It holds blocks too ([`MemoryReadings::put_block`]): a block is one stored item,
/// ordered, limited and filtered by its own key and `ts_ms` (its first member's), and
/// expanded into its members in the page, as the DynamoDB adapter does.
///
/// It holds other stored items as they are ([`MemoryReadings::put_item`]: slabs and
/// runs, `crate::slab`), which [`ReadingSource::query_items`] returns unexpanded, `SK <=`
/// a bound or the whole partition, each page ending at its limit or at 1 MB of items
/// read, as DynamoDB's does. Such an item has no `ts_ms`: a time filter drops it and
/// the time index does not hold it. Every call is charged in read units, as DynamoDB
/// bills it ([`MemoryReadings::read_units`]).
///
/// It takes writes as the table does, through [`BatchTable`] (the sealer's runs): each
/// item stored as what it is, a block, a reading (an item with a `ts_ms`) or another
/// item as it is, a call refused as DynamoDB refuses it.
#[derive(Debug, Default)]
pub struct MemoryReadings {
    items: Mutex<BTreeMap<(String, String), Stored>>,
    page_cap: Option<u32>,
    calls: AtomicU64,
    evaluated: AtomicU64,
    /// Read units consumed, in halves (an eventually consistent 4 KB).
    half_read_units: AtomicU64,
    throttled: AtomicBool,
    latency: Mutex<Duration>,
    key_latency: Mutex<BTreeMap<String, Duration>>,
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
        self.items
            .lock()
            .insert((item.pk.clone(), item.sk.clone()), Stored::Reading(item));
    }

    /// Stores a block item, replacing one with the same key.
    pub fn put_block(&self, block: BlockItem) {
        self.items
            .lock()
            .insert((block.pk.clone(), block.sk.clone()), Stored::Block(block));
    }

    /// Stores an item as it is (a slab or run), replacing one with the same key; refuses
    /// one without a string `PK` and `SK`, as DynamoDB does.
    pub fn put_item(&self, item: Item) -> Result<(), StoreError> {
        let key = stored_key(&item)?;
        self.items
            .lock()
            .insert((key.pk.clone(), key.sk.clone()), Stored::Item { key, item });
        Ok(())
    }

    /// Read units consumed by every call so far, as DynamoDB bills them: a Query page
    /// the size of the items it evaluated, a GetItem the size of its item, each rounded
    /// up to 4 KB, at least one unit, half of it when eventually consistent.
    pub fn read_units(&self) -> f64 {
        self.half_read_units.load(Ordering::SeqCst) as f64 / 2.0
    }

    fn charge(&self, bytes: usize, consistent: bool) {
        let units = bytes.max(1).div_ceil(READ_UNIT_BYTES) as u64;
        let halves = if consistent { 2 * units } else { units };
        self.half_read_units.fetch_add(halves, Ordering::SeqCst);
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
        *self.latency.lock() = latency;
    }

    /// Every call on partition key `pk` waits `latency` more (one slow key).
    pub fn set_key_latency(&self, pk: &str, latency: Duration) {
        self.key_latency.lock().insert(pk.to_owned(), latency);
    }

    async fn wait(&self, pk: &str) {
        let own = self.key_latency.lock().get(pk).copied();
        let latency = *self.latency.lock() + own.unwrap_or_default();
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
    fn evaluate(&self, r: &PageRequest, cap: Option<u32>) -> Result<Vec<Stored>, StoreError> {
        let items = self.items.lock();
        let partition = items
            .range((r.pk.clone(), String::new())..)
            .take_while(|((pk, _), _)| pk == &r.pk)
            .map(|(_, item)| item);
        let mut matching: Vec<&Stored> = match (&r.time_index, &r.sk_between) {
            (Some(_), Some(_)) => {
                return Err(StoreError::Validation(
                    "the time index has no SK condition".to_owned(),
                ));
            }
            (Some(_), None) => partition
                .filter(|i| i.ts_ms().is_some() && in_ts_range(r, i))
                .collect(),
            (None, Some((lo, hi))) => partition
                .filter(|i| lo.as_str() <= i.sk() && i.sk() <= hi.as_str())
                .collect(),
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
            let after = |i: &&Stored| match &index_start {
                Some(at) if r.ascending => index_order(i) > *at,
                Some(at) => index_order(i) < *at,
                None if r.ascending => i.sk() > start.key.sk.as_str(),
                None => i.sk() < start.key.sk.as_str(),
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

/// A stored item: a reading's, a block, or another item as it is (a slab or run).
#[derive(Debug, Clone)]
enum Stored {
    Reading(ReadingItem),
    Block(BlockItem),
    Item { key: ItemKey, item: Item },
}

impl Stored {
    fn sk(&self) -> &str {
        match self {
            Stored::Reading(i) => &i.sk,
            Stored::Block(b) => &b.sk,
            Stored::Item { key, .. } => &key.sk,
        }
    }

    /// Its sort time: a block's is its first member's; another item has none.
    fn ts_ms(&self) -> Option<i64> {
        match self {
            Stored::Reading(i) => Some(i.ts_ms),
            Stored::Block(b) => Some(b.ts_ms),
            Stored::Item { .. } => None,
        }
    }

    fn key(&self) -> ItemKey {
        match self {
            Stored::Reading(i) => i.key(),
            Stored::Block(b) => ItemKey {
                pk: b.pk.clone(),
                sk: b.sk.clone(),
            },
            Stored::Item { key, .. } => key.clone(),
        }
    }

    /// Its readings: a block's members, the reading itself, or what another item holds
    /// ([`crate::block::expand`]).
    fn readings(self) -> Result<Vec<ReadingItem>, StoreError> {
        match self {
            Stored::Reading(i) => Ok(vec![i]),
            Stored::Block(b) => b.readings(),
            Stored::Item { item, .. } => crate::block::expand(item),
        }
    }

    /// The item as DynamoDB returns it.
    fn to_item(&self) -> Result<Item, StoreError> {
        match self {
            Stored::Reading(i) => i.to_item(),
            Stored::Block(b) => b.to_item(),
            Stored::Item { item, .. } => Ok(item.clone()),
        }
    }

    /// Its size, as DynamoDB bills a read of it.
    fn size(&self) -> usize {
        match self {
            Stored::Item { item, .. } => item_size(item),
            stored => stored.to_item().map_or(0, |item| item_size(&item)),
        }
    }
}

/// The time index's order: ts ascending, ties by SK descending (it holds only items
/// with a `ts_ms`).
fn index_order(item: &Stored) -> (i64, Reverse<String>) {
    (
        item.ts_ms().unwrap_or(i64::MIN),
        Reverse(item.sk().to_owned()),
    )
}

fn in_ts_range(r: &PageRequest, item: &Stored) -> bool {
    r.ts_ms_between
        .is_none_or(|(lo, hi)| item.ts_ms().is_some_and(|ts| lo <= ts && ts <= hi))
}

impl ReadingSource for MemoryReadings {
    async fn query_page(&self, r: &PageRequest) -> Result<Page, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.wait(&r.pk).await;
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
            ts_ms: r.time_index.as_ref().and_then(|_| i.ts_ms()),
        });
        let items_read = evaluated.len() as u64;
        self.evaluated.fetch_add(items_read, Ordering::SeqCst);
        self.charge(evaluated.iter().map(Stored::size).sum(), r.consistent);
        // On the table, ts_ms is a filter, applied after the limit.
        let kept: Vec<Stored> = evaluated
            .into_iter()
            .filter(|i| in_ts_range(r, i))
            .collect();
        let last_ts = kept
            .last()
            .and_then(Stored::ts_ms)
            .or_else(|| last_key.as_ref().and_then(LastKey::sort_time));
        let mut items = Vec::with_capacity(kept.len());
        for stored in kept {
            items.extend(stored.readings()?);
        }
        Ok(Page {
            items,
            last_key,
            items_read,
            last_ts,
        })
    }

    async fn get_reading(
        &self,
        key: &ItemKey,
        consistent: bool,
    ) -> Result<Option<ReadingItem>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.wait(&key.pk).await;
        let stored = self
            .items
            .lock()
            .get(&(key.pk.clone(), key.sk.clone()))
            .cloned();
        self.charge(stored.as_ref().map_or(0, Stored::size), consistent);
        // A block's key is never a reading's own: GetItem of it reads no reading.
        match stored {
            Some(Stored::Reading(item)) => Ok(Some(item)),
            Some(Stored::Block(_) | Stored::Item { .. }) | None => Ok(None),
        }
    }

    async fn query_items(&self, r: &ItemsRequest) -> Result<ItemsPage, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.wait(&r.pk).await;
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
        // Every sort key is at least the empty string.
        let request = PageRequest {
            pk: r.pk.clone(),
            sk_between: r.sk_at_most.clone().map(|upper| (String::new(), upper)),
            ts_ms_between: None,
            time_index: None,
            limit: None,
            ascending: r.ascending,
            start_after: r
                .start_after
                .clone()
                .map(|key| LastKey { key, ts_ms: None }),
            consistent: r.consistent,
        };
        let mut evaluated = self.evaluate(&request, cap)?;
        // The page ends at its limit (even with nothing after it, DynamoDB then still
        // names its last key), or once it has read 1 MB.
        let mut stopped = cap.is_some_and(|c| evaluated.len() == c as usize);
        let mut bytes = 0;
        let mut kept = 0;
        for item in &evaluated {
            if bytes >= PAGE_BYTES {
                stopped = true;
                break;
            }
            bytes += item.size();
            kept += 1;
        }
        evaluated.truncate(kept);
        let items_read = evaluated.len() as u64;
        self.evaluated.fetch_add(items_read, Ordering::SeqCst);
        self.charge(bytes, r.consistent);
        let last_key = evaluated.last().filter(|_| stopped).map(Stored::key);
        let items = evaluated
            .iter()
            .map(|stored| {
                Ok(StoredItem {
                    sk: stored.sk().to_owned(),
                    item: stored.to_item()?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(ItemsPage {
            items,
            last_key,
            items_read,
        })
    }
}

impl BatchTable for MemoryReadings {
    async fn batch_write(&self, items: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let keys = items
            .iter()
            .map(stored_key)
            .collect::<Result<Vec<_>, _>>()?;
        crate::memory::refuse_batch(&items, &keys)?;
        let mut stored = Vec::with_capacity(items.len());
        for (item, key) in items.into_iter().zip(keys) {
            stored.push(if crate::block::is_block(&item) {
                Stored::Block(BlockItem::from_item(item)?)
            } else if item.contains_key(TS_MS) {
                Stored::Reading(ReadingItem::from_item(item)?)
            } else {
                Stored::Item { key, item }
            });
        }
        let mut table = self.items.lock();
        for item in stored {
            let key = item.key();
            table.insert((key.pk, key.sk), item);
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use sharding::time::Timestamp;

    use super::*;
    use crate::item::Reading;

    const T: i64 = 1_782_086_400_000;

    fn reading(ts_ms: i64, id: &str) -> Reading {
        Reading {
            device_id: "dev".into(),
            event_id: id.into(),
            ts: Timestamp::from_millis(ts_ms).expect("in range"),
            metrics: BTreeMap::from([(
                "t".to_owned(),
                crate::Decimal::from_f64(1.0).expect("a number"),
            )]),
            tags: BTreeMap::new(),
            written: crate::WriteOrder::OLDEST,
        }
    }

    fn key_of(r: &Reading) -> ItemKey {
        ItemKey {
            pk: "p".into(),
            sk: format!("dev#{}#{}", r.ts.to_rfc3339(), r.event_id),
        }
    }

    fn request(limit: Option<u32>, ascending: bool, ts: Option<(i64, i64)>) -> PageRequest {
        PageRequest {
            pk: "p".into(),
            sk_between: Some(("dev#".into(), "dev#~".into())),
            ts_ms_between: ts,
            time_index: None,
            limit,
            ascending,
            start_after: None,
            consistent: false,
        }
    }

    /// A reading alone at T, a block of three from T + 10, a reading at T + 20.
    fn table() -> MemoryReadings {
        let table = MemoryReadings::new(None);
        let day = Duration::from_secs(86_400);
        let alone = reading(T, "a");
        table.put(ReadingItem::new(&alone, key_of(&alone), day));
        let members = [
            reading(T + 10, "b"),
            reading(T + 30, "c"),
            reading(T + 50, "d"),
        ];
        table.put_block(BlockItem::new(&members, &key_of(&members[0]), day).expect("block"));
        let last = reading(T + 20, "e");
        table.put(ReadingItem::new(&last, key_of(&last), day));
        table
    }

    fn ids(page: &Page) -> Vec<&str> {
        page.items.iter().map(|i| i.event_id.as_str()).collect()
    }

    #[tokio::test]
    async fn a_batch_write_stores_each_item_as_what_it_is_and_is_refused_as_dynamodb_refuses_it() {
        let table = MemoryReadings::new(None);
        let day = Duration::from_secs(86_400);
        let own = reading(T, "a");
        let block = [reading(T + 10, "b"), reading(T + 30, "c")];
        let marker = crate::slab::marker("p", "#marker", 1);
        let items = vec![
            ReadingItem::new(&own, key_of(&own), day).to_item().unwrap(),
            BlockItem::new(&block, &key_of(&block[0]), day)
                .unwrap()
                .to_item()
                .unwrap(),
            marker.item.clone(),
        ];
        assert!(table.batch_write(items).await.unwrap().is_empty());
        // The reading and the block read as readings, in time; the marker as none.
        let page = table.query_page(&request(None, true, None)).await.unwrap();
        assert_eq!(ids(&page), ["a", "b", "c"]);
        let items = ItemsRequest {
            pk: "p".into(),
            sk_at_most: None,
            limit: None,
            ascending: true,
            start_after: None,
            consistent: true,
        };
        let stored = table.query_items(&items).await.unwrap();
        assert_eq!(stored.items[0].item, marker.item);
        // More than 25 items, or one key twice, are refused whole.
        let many: Vec<Item> = (0..26)
            .map(|n| crate::slab::marker("p", &format!("#{n:02}"), 1).item)
            .collect();
        assert!(matches!(
            table.batch_write(many).await,
            Err(StoreError::Validation(_))
        ));
        let twice = vec![marker.item.clone(), marker.item];
        assert!(matches!(
            table.batch_write(twice).await,
            Err(StoreError::Validation(_))
        ));
    }

    #[tokio::test]
    async fn a_block_is_one_stored_item_paged_by_its_own_key_and_time() {
        let table = table();
        let first = table
            .query_page(&request(Some(2), true, None))
            .await
            .unwrap();
        // Blocks sort in their own lane, after the device's items of one reading.
        assert_eq!(ids(&first), ["a", "e"]);
        assert_eq!((first.items_read, first.last_ts), (2, Some(T + 20)));
        let next = PageRequest {
            start_after: first.last_key.clone(),
            ..request(Some(2), true, None)
        };
        let second = table.query_page(&next).await.unwrap();
        assert_eq!(ids(&second), ["b", "c", "d"]);
        assert_eq!((second.last_key, second.last_ts), (None, Some(T + 10)));
        let down = table
            .query_page(&request(Some(2), false, None))
            .await
            .unwrap();
        assert_eq!(ids(&down), ["b", "c", "d", "e"]);
        assert_eq!(down.last_ts, Some(T + 20));
        // The filter sees the block's own ts_ms: from T + 11 on, the block is out.
        let later = table
            .query_page(&request(None, true, Some((T + 11, T + 60))))
            .await
            .unwrap();
        assert_eq!((ids(&later), later.items_read), (vec!["e"], 3));
        // A block's key holds no reading of its own.
        let members = [
            reading(T + 10, "b"),
            reading(T + 30, "c"),
            reading(T + 50, "d"),
        ];
        let block_key = BlockItem::key(&members, &key_of(&members[0]));
        assert_eq!(table.get_reading(&block_key, false).await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_time_index_orders_a_block_by_its_first_member() {
        let table = table();
        let by_time = PageRequest {
            sk_between: None,
            time_index: Some("by-time".into()),
            ..request(Some(2), true, Some((T + 5, T + 40)))
        };
        let page = table.query_page(&by_time).await.unwrap();
        assert_eq!(ids(&page), ["b", "c", "d", "e"]);
        assert_eq!(page.last_ts, Some(T + 20));
        assert_eq!(page.last_key.and_then(|k| k.ts_ms), Some(T + 20));
    }

    /// Items stored as they are under partition `p`, sort keys `k0`..`k{n-1}`, each with
    /// a tag of `pad` bytes.
    fn stored_items(n: usize, pad: usize) -> MemoryReadings {
        let table = MemoryReadings::new(None);
        for i in 0..n {
            let mut r = reading(T + i as i64, &format!("e{i}"));
            r.tags.insert("pad".into(), "x".repeat(pad));
            let key = ItemKey {
                pk: "p".into(),
                sk: format!("k{i}"),
            };
            let item = ReadingItem::new(&r, key, Duration::from_secs(60));
            table.put_item(item.to_item().unwrap()).unwrap();
        }
        table
    }

    fn items_request(upper: Option<&str>, limit: Option<u32>) -> ItemsRequest {
        ItemsRequest {
            pk: "p".into(),
            sk_at_most: upper.map(str::to_owned),
            limit,
            ascending: false,
            start_after: None,
            consistent: false,
        }
    }

    fn sks(page: &ItemsPage) -> Vec<&str> {
        page.items.iter().map(|i| i.sk.as_str()).collect()
    }

    #[tokio::test]
    async fn items_come_as_stored_below_a_bound_descending_page_by_page() {
        let table = stored_items(5, 0);
        let first = table
            .query_items(&items_request(Some("k3"), Some(2)))
            .await
            .unwrap();
        assert_eq!(sks(&first), ["k3", "k2"]);
        assert_eq!(first.items_read, 2);
        let next = ItemsRequest {
            start_after: first.last_key.clone(),
            ..items_request(Some("k3"), Some(2))
        };
        let second = table.query_items(&next).await.unwrap();
        assert_eq!(sks(&second), ["k1", "k0"]);
        // Stopped at its limit: a key is named though nothing follows, as DynamoDB does.
        assert!(second.last_key.is_some());
        let last = ItemsRequest {
            start_after: second.last_key,
            ..items_request(Some("k3"), Some(2))
        };
        let third = table.query_items(&last).await.unwrap();
        assert!(third.items.is_empty() && third.last_key.is_none());
        // The whole partition, ascending; an item is returned with its attributes.
        let all = ItemsRequest {
            ascending: true,
            ..items_request(None, None)
        };
        let page = table.query_items(&all).await.unwrap();
        assert_eq!(sks(&page), ["k0", "k1", "k2", "k3", "k4"]);
        let expanded = crate::block::expand(page.items[4].item.clone()).unwrap();
        assert_eq!(expanded[0].event_id, "e4");
        assert_eq!(table.calls(), 4);
        assert_eq!(table.evaluated(), 9);
        // Another partition's key does not start a page.
        let elsewhere = ItemsRequest {
            start_after: Some(ItemKey {
                pk: "q".into(),
                sk: "k1".into(),
            }),
            ..items_request(None, None)
        };
        assert!(table.query_items(&elsewhere).await.is_err());
    }

    #[tokio::test]
    async fn a_page_of_items_ends_at_a_megabyte_and_is_billed_by_size() {
        // Twelve items of about 100 KB: a page holds the eleven that reach 1 MB.
        let table = stored_items(12, 100_000);
        let page = table.query_items(&items_request(None, None)).await.unwrap();
        assert_eq!(page.items.len(), 11);
        assert!(page.last_key.is_some());
        let size = item_size(&page.items[0].item);
        // Eventually consistent: half a unit per 4 KB of every item read.
        assert_eq!(
            table.read_units(),
            (11 * size).div_ceil(READ_UNIT_BYTES) as f64 / 2.0
        );
        // A strongly consistent GetItem of a missing item still costs a unit.
        let missing = ItemKey {
            pk: "p".into(),
            sk: "none".into(),
        };
        let before = table.read_units();
        assert_eq!(table.get_reading(&missing, true).await.unwrap(), None);
        assert_eq!(table.read_units() - before, 1.0);
        // An item as it is holds no reading for GetItem, and throttles as a Query does.
        let stored = ItemKey {
            pk: "p".into(),
            sk: "k0".into(),
        };
        assert_eq!(table.get_reading(&stored, false).await.unwrap(), None);
        table.set_throttled(true);
        let err = table.query_items(&items_request(None, None)).await;
        assert!(matches!(err, Err(StoreError::Throttled { .. })), "{err:?}");
    }
}
