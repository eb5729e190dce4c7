//! [`MemoryScan`]: a table behind the [`TableScan`] port, paged as DynamoDB pages a
//! Scan, with injectable throttles and errors.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::{StoreError, ThrottleKind};
use crate::item::ReadingItem;
use crate::scan::{ScanKey, ScanPage, ScanRequest, StartKey, TableScan, scanned};
use crate::size::item_size;

/// DynamoDB's page: a Scan stops once the items it evaluated reach 1 MB.
const PAGE_BYTES: usize = 1024 * 1024;

#[derive(Debug, Default)]
struct ScanState {
    items: Vec<HashMap<String, AttributeValue>>,
    /// Most items a page holds (`None`: only the 1 MB page bounds it).
    page_items: Option<usize>,
    scripted: VecDeque<StoreError>,
    throttled: bool,
    calls: u64,
}

/// A table's items in the order a Scan returns them (the order they were put in).
/// A page ends when its items reach 1 MB, or at the page size set with
/// [`MemoryScan::set_page_items`], and then carries a `last_key` even when nothing
/// follows, as DynamoDB's may. Cheap to clone; clones share the table.
#[derive(Debug, Clone, Default)]
pub struct MemoryScan {
    state: Arc<Mutex<ScanState>>,
}

impl MemoryScan {
    /// An empty table without faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table holding `items`, in this order (e.g. a [`super::MemoryTable`]'s).
    pub fn with_items(items: impl IntoIterator<Item = HashMap<String, AttributeValue>>) -> Self {
        let scan = Self::new();
        scan.state.lock().items.extend(items);
        scan
    }

    /// Adds an item after the others.
    pub fn put(&self, item: HashMap<String, AttributeValue>) {
        self.state.lock().items.push(item);
    }

    /// Adds a readings-table item after the others, as the writer stores it.
    pub fn put_reading(&self, reading: &ReadingItem) -> Result<(), StoreError> {
        self.put(reading.to_item()?);
        Ok(())
    }

    /// Pages hold at most `items` items (at least one).
    pub fn set_page_items(&self, items: usize) {
        self.state.lock().page_items = Some(items.max(1));
    }

    /// The next calls fail with these errors, in order, before reading any item.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = StoreError>) {
        self.state.lock().scripted.extend(errors);
    }

    /// While on, every call fails with a read key-range throttle.
    pub fn set_throttled(&self, on: bool) {
        self.state.lock().throttled = on;
    }

    /// Calls made so far, failed ones included.
    pub fn calls(&self) -> u64 {
        self.state.lock().calls
    }
}

impl TableScan for MemoryScan {
    async fn scan_page(&self, request: &ScanRequest) -> Result<ScanPage, StoreError> {
        let mut state = self.state.lock();
        state.calls += 1;
        if let Some(err) = state.scripted.pop_front() {
            return Err(err);
        }
        if state.throttled {
            return Err(StoreError::Throttled {
                kind: ThrottleKind::KeyRange,
                reason: "TableReadKeyRangeThroughputExceeded".into(),
            });
        }
        let from = match &request.start_after {
            None => 0,
            Some(ScanKey(StartKey::Position(at))) => (*at).min(state.items.len()),
            Some(ScanKey(StartKey::Dynamo(_))) => {
                return Err(StoreError::Validation(
                    "the scan key comes from another table".to_owned(),
                ));
            }
        };
        let cap = state.page_items.unwrap_or(usize::MAX);
        let (mut to, mut bytes) = (from, 0);
        while to < state.items.len() && to - from < cap && bytes < PAGE_BYTES {
            bytes += item_size(&state.items[to]);
            to += 1;
        }
        let stopped = to - from == cap || bytes >= PAGE_BYTES;
        let items = state.items[from..to]
            .iter()
            .map(|item| scanned(item, &request.attributes))
            .collect();
        Ok(ScanPage {
            items,
            last_key: stopped.then_some(ScanKey(StartKey::Position(to))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::ScanAttributes;

    fn item(pk: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([("PK".to_owned(), AttributeValue::S(pk.to_owned()))])
    }

    fn request(start_after: Option<ScanKey>) -> ScanRequest {
        ScanRequest {
            attributes: ScanAttributes::readings(),
            start_after,
        }
    }

    #[tokio::test]
    async fn pages_stop_at_the_page_size_then_at_the_end() {
        let scan = MemoryScan::with_items(["a", "b", "c", "d"].map(item));
        scan.set_page_items(2);
        let mut pks = Vec::new();
        let mut start = None;
        let mut pages = 0;
        loop {
            let page = scan.scan_page(&request(start)).await.expect("page");
            pages += 1;
            pks.extend(page.items.into_iter().filter_map(|i| i.pk));
            start = page.last_key;
            if start.is_none() {
                break;
            }
        }
        assert_eq!(pks, ["a", "b", "c", "d"]);
        // The second page stopped at its size with nothing after it: one empty page more.
        assert_eq!(pages, 3);
    }

    #[tokio::test]
    async fn injected_faults_come_first_then_the_table_reads() {
        let scan = MemoryScan::with_items([item("a")]);
        scan.fail_next([StoreError::Transient("blip".into())]);
        let err = scan.scan_page(&request(None)).await.expect_err("scripted");
        assert!(err.is_retryable());
        scan.set_throttled(true);
        let err = scan.scan_page(&request(None)).await.expect_err("throttled");
        assert!(err.is_key_range_throttle());
        scan.set_throttled(false);
        let page = scan.scan_page(&request(None)).await.expect("page");
        assert_eq!(page.items.len(), 1);
        assert_eq!(scan.calls(), 3);
    }
}
