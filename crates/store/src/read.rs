//! Range reads: one page of one DynamoDB Query (or one GetItem) behind a narrow port,
//! so the query service's scatter-gather can run against DynamoDB or an in-memory fake.
//!
//! The port speaks DynamoDB's own paging semantics: `limit` bounds the items
//! *evaluated* (before the time filter), a page may come back with a `last_key` even
//! when nothing is left, and `items_read` is what the page cost (ScannedCount).
//!
//! A request may name the table's time index (a local secondary index whose sort key
//! is `ts_ms`, see template.yaml `TimeIndex`): the page then lists a partition's items
//! in time order, with the time range as key condition, so `limit` counts only items
//! inside the range.
//!
//! A page may hold blocks (`crate::block`): each is expanded into its readings as the
//! page is decoded, and [`Page::last_ts`] keeps the sort time of the last stored item,
//! which is what a reader of blocks bounds the next page by.
//!
//! A slab or run partition (`store::slab`) is read by [`ReadingSource::query_items`]:
//! its items each hold many devices' readings, so they come back as stored, each with
//! its sort key, and the reader chooses which to expand ([`crate::block::expand`]); a
//! run partition is read newest sort key first from a device's own, `SK <= upper`.
//!
//! Whole-table reads (Scan) are [`crate::scan`]'s.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::types::{AttributeValue, ThrottlingReason};
use sharding::block::is_block_sk;
use sharding::key::ItemKey;
use sharding::time::Timestamp;
use tracing::instrument;

use crate::batch::Item;
use crate::block::BlockItem;
use crate::error::StoreError;
use crate::item::{PK, ReadingItem, SK};

/// Attribute names of the readings table's key and time attribute.
pub(crate) const TS_MS: &str = "ts_ms";

/// Where a page stopped, and where the next one starts (DynamoDB's `LastEvaluatedKey`,
/// sent back as the next page's `ExclusiveStartKey`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LastKey {
    /// The primary key of the last item the page evaluated.
    pub key: ItemKey,
    /// The time index's sort key, set when the page came from the index (its
    /// `ExclusiveStartKey` must name it); `None` for the table.
    pub ts_ms: Option<i64>,
}

impl LastKey {
    /// The sort time of the item it names: the time index's `ts_ms`, else the time
    /// its sort key carries (`..#{ts}#{event id}`, a block's followed by its digest),
    /// when it carries one.
    pub fn sort_time(&self) -> Option<i64> {
        self.ts_ms.or_else(|| {
            let sk = self.key.sk.as_str();
            let sk = if is_block_sk(sk) {
                sk.rsplit_once('#')?.0
            } else {
                sk
            };
            // An event id holds no `#`: the time is the segment before it.
            let (rest, _event_id) = sk.rsplit_once('#')?;
            let ts = rest.rsplit('#').next()?;
            ts.contains('T')
                .then(|| Timestamp::parse(ts).ok())
                .flatten()
                .map(Timestamp::as_millis)
        })
    }
}

/// One page of one Query on the readings table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Partition key value.
    pub pk: String,
    /// Inclusive sort-key bounds (`SK BETWEEN lo AND hi`); `None` reads the partition.
    pub sk_between: Option<(String, String)>,
    /// Inclusive bounds on `ts_ms`: a filter (applied after `limit`) on the table, the
    /// key condition on the time index.
    pub ts_ms_between: Option<(i64, i64)>,
    /// Query this local secondary index (sort key `ts_ms`) instead of the table; then
    /// `sk_between` must be `None`.
    pub time_index: Option<String>,
    /// Most items to evaluate; `None` lets DynamoDB fill a 1 MB page.
    pub limit: Option<u32>,
    /// Sort-key order (`ScanIndexForward`).
    pub ascending: bool,
    /// Continue after this key (`ExclusiveStartKey`), from a previous page's `last_key`.
    pub start_after: Option<LastKey>,
    /// Strongly consistent read.
    pub consistent: bool,
}

/// The answer to one [`PageRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// Matching items in sort-key order (as requested), each block expanded in place
    /// into its members.
    pub items: Vec<ReadingItem>,
    /// Present when DynamoDB stopped early (limit or 1 MB); absent when the key range
    /// is exhausted.
    pub last_key: Option<LastKey>,
    /// Items evaluated (ScannedCount), the read's cost, including filtered-out ones;
    /// a block counts once, whatever its members.
    pub items_read: u64,
    /// The sort time (`ts_ms`; a block's is its first member's) of the page's last
    /// stored item, or, on a page that returned none, of its last evaluated key
    /// ([`LastKey::sort_time`]); `None` when neither tells.
    pub last_ts: Option<i64>,
}

/// One page of a Query whose items come back as stored, not expanded: a slab or run
/// partition's (`store::slab`), whose items hold many devices' readings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemsRequest {
    /// Partition key value.
    pub pk: String,
    /// `SK <= sk_at_most`; `None` reads the partition.
    pub sk_at_most: Option<String>,
    /// Most items to evaluate; `None` lets DynamoDB fill a 1 MB page.
    pub limit: Option<u32>,
    /// Sort-key order (`ScanIndexForward`).
    pub ascending: bool,
    /// Continue after this key (`ExclusiveStartKey`), a previous page's `last_key`.
    pub start_after: Option<ItemKey>,
    /// Strongly consistent read.
    pub consistent: bool,
}

/// A stored item as a Query returned it, with its sort key.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredItem {
    pub sk: String,
    pub item: Item,
}

/// The answer to one [`ItemsRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct ItemsPage {
    /// The items in sort-key order (as requested).
    pub items: Vec<StoredItem>,
    /// Present when DynamoDB stopped early (limit or 1 MB), even with nothing left.
    pub last_key: Option<ItemKey>,
    /// Items evaluated (ScannedCount), the read's cost.
    pub items_read: u64,
}

/// The primary key of a stored item of the readings table.
pub(crate) fn stored_key(item: &Item) -> Result<ItemKey, StoreError> {
    let get = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        _ => Err(StoreError::Malformed(format!(
            "a stored item without a string {name}"
        ))),
    };
    Ok(ItemKey {
        pk: get(PK)?,
        sk: get(SK)?,
    })
}

/// A page's stored items as readings, blocks, slabs and runs expanded (a window's
/// marker holds none), and the sort time of the last reading or block stored. An item
/// that breaks its format fails the page, as a malformed reading item does.
fn decode_items(
    items: Vec<HashMap<String, AttributeValue>>,
) -> Result<(Vec<ReadingItem>, Option<i64>), StoreError> {
    let mut out = Vec::with_capacity(items.len());
    let mut last_ts = None;
    for item in items {
        if crate::slab::is_slab(&item) || crate::slab::is_marker(&item) {
            // No sort time: a slab's or run's members, none of a marker.
            out.extend(crate::block::expand(item)?);
        } else if crate::block::is_block(&item) {
            let block = BlockItem::from_item(item)?;
            last_ts = Some(block.ts_ms);
            out.extend(block.readings()?);
        } else {
            let reading = ReadingItem::from_item(item)
                .map_err(|e| StoreError::Malformed(format!("reading item: {e}")))?;
            last_ts = Some(reading.ts_ms);
            out.push(reading);
        }
    }
    Ok((out, last_ts))
}

/// The read port of the readings table.
pub trait ReadingSource: Send + Sync {
    /// Reads one page of one Query.
    fn query_page(
        &self,
        request: &PageRequest,
    ) -> impl Future<Output = Result<Page, StoreError>> + Send;

    /// Reads one item by its full key.
    fn get_reading(
        &self,
        key: &ItemKey,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<ReadingItem>, StoreError>> + Send;

    /// Reads one page of one Query, its items as stored.
    fn query_items(
        &self,
        request: &ItemsRequest,
    ) -> impl Future<Output = Result<ItemsPage, StoreError>> + Send;
}

impl<T: ReadingSource> ReadingSource for &T {
    fn query_page(
        &self,
        request: &PageRequest,
    ) -> impl Future<Output = Result<Page, StoreError>> + Send {
        (**self).query_page(request)
    }

    fn get_reading(
        &self,
        key: &ItemKey,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<ReadingItem>, StoreError>> + Send {
        (**self).get_reading(key, consistent)
    }

    fn query_items(
        &self,
        request: &ItemsRequest,
    ) -> impl Future<Output = Result<ItemsPage, StoreError>> + Send {
        (**self).query_items(request)
    }
}

/// [`ReadingSource`] on a DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoReadingSource {
    client: Client,
    table: String,
}

/// The SDK's retries on a read: a read stops at its function's deadline, and the
/// SDK's default first backoff (up to 1 s, then 2 s) would spend a ninth of a 10-second
/// function's time on one failed call. Three attempts, backing off at most 50 ms, then
/// 100 ms, jittered.
fn read_retries() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(50))
        .with_max_backoff(Duration::from_millis(100))
}

impl DynamoReadingSource {
    /// A reader of `table`, retrying a failed call with [`read_retries`].
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let config = client
            .config()
            .to_builder()
            .retry_config(read_retries())
            .build();
        Self {
            client: Client::from_conf(config),
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }
}

impl ReadingSource for DynamoReadingSource {
    #[instrument(skip_all, fields(pk = %request.pk, limit = ?request.limit, asc = request.ascending))]
    async fn query_page(&self, request: &PageRequest) -> Result<Page, StoreError> {
        let mut builder = self
            .client
            .query()
            .table_name(&self.table)
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":pk", AttributeValue::S(request.pk.clone()))
            .scan_index_forward(request.ascending)
            .consistent_read(request.consistent);
        let mut key_condition = "#pk = :pk".to_string();
        if let Some(index) = &request.time_index {
            if request.sk_between.is_some() {
                return Err(StoreError::Malformed(
                    "a time-index read takes no sort-key bounds".into(),
                ));
            }
            builder = builder.index_name(index);
            if let Some((lo, hi)) = request.ts_ms_between {
                key_condition.push_str(" AND #ts BETWEEN :tslo AND :tshi");
                builder = builder
                    .expression_attribute_names("#ts", TS_MS)
                    .expression_attribute_values(":tslo", AttributeValue::N(lo.to_string()))
                    .expression_attribute_values(":tshi", AttributeValue::N(hi.to_string()));
            }
        }
        if let Some((lo, hi)) = &request.sk_between {
            key_condition.push_str(" AND #sk BETWEEN :sklo AND :skhi");
            builder = builder
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":sklo", AttributeValue::S(lo.clone()))
                .expression_attribute_values(":skhi", AttributeValue::S(hi.clone()));
        }
        builder = builder.key_condition_expression(key_condition);
        if let Some((lo, hi)) = request
            .ts_ms_between
            .filter(|_| request.time_index.is_none())
        {
            builder = builder
                .filter_expression("#ts BETWEEN :tslo AND :tshi")
                .expression_attribute_names("#ts", TS_MS)
                .expression_attribute_values(":tslo", AttributeValue::N(lo.to_string()))
                .expression_attribute_values(":tshi", AttributeValue::N(hi.to_string()));
        }
        if let Some(limit) = request.limit {
            // DynamoDB refuses Limit 0; the caller never needs it.
            builder = builder.limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX));
        }
        if let Some(start) = &request.start_after {
            builder = builder.set_exclusive_start_key(Some(start_key_map(start)));
        }
        let out = builder.send().await.map_err(|e| query_error(&e))?;
        let (items, last_item_ts) = decode_items(out.items.unwrap_or_default())?;
        let last_key = match out.last_evaluated_key {
            Some(key) => Some(last_key(&key)?),
            None => None,
        };
        let last_ts = last_item_ts.or_else(|| last_key.as_ref().and_then(LastKey::sort_time));
        let items_read = u64::try_from(out.scanned_count).unwrap_or(0);
        tracing::debug!(
            returned = items.len(),
            items_read,
            more = last_key.is_some(),
            "query page"
        );
        Ok(Page {
            items,
            last_key,
            items_read,
            last_ts,
        })
    }

    #[instrument(skip_all, fields(pk = %key.pk, sk = %key.sk))]
    async fn get_reading(
        &self,
        key: &ItemKey,
        consistent: bool,
    ) -> Result<Option<ReadingItem>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key_map(key)))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| get_error(&e))?;
        match out.item {
            None => Ok(None),
            Some(item) => ReadingItem::from_item(item)
                .map(Some)
                .map_err(|e| StoreError::Malformed(format!("reading item: {e}"))),
        }
    }

    #[instrument(skip_all, fields(pk = %request.pk, limit = ?request.limit, asc = request.ascending))]
    async fn query_items(&self, request: &ItemsRequest) -> Result<ItemsPage, StoreError> {
        let mut builder = self
            .client
            .query()
            .table_name(&self.table)
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":pk", AttributeValue::S(request.pk.clone()))
            .scan_index_forward(request.ascending)
            .consistent_read(request.consistent)
            .set_exclusive_start_key(request.start_after.as_ref().map(key_map));
        builder = match &request.sk_at_most {
            Some(upper) => builder
                .key_condition_expression("#pk = :pk AND #sk <= :skhi")
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":skhi", AttributeValue::S(upper.clone())),
            None => builder.key_condition_expression("#pk = :pk"),
        };
        if let Some(limit) = request.limit {
            // DynamoDB refuses Limit 0; the caller never needs it.
            builder = builder.limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX));
        }
        let out = builder.send().await.map_err(|e| query_error(&e))?;
        let items = out
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|item| {
                let sk = stored_key(&item)?.sk;
                Ok(StoredItem { sk, item })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let last_key = match out.last_evaluated_key {
            Some(key) => Some(stored_key(&key)?),
            None => None,
        };
        Ok(ItemsPage {
            items,
            last_key,
            items_read: u64::try_from(out.scanned_count).unwrap_or(0),
        })
    }
}

fn key_map(key: &ItemKey) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (PK.to_string(), AttributeValue::S(key.pk.clone())),
        (SK.to_string(), AttributeValue::S(key.sk.clone())),
    ])
}

/// The readings table read and written: the sealer's, which reads slabs and writes
/// the runs it compacts them into (`sealer::compact`). Reads as
/// [`DynamoReadingSource`], writes as [`crate::dynamo::DynamoTable`].
#[derive(Debug, Clone)]
pub struct DynamoReadings {
    reads: DynamoReadingSource,
    writes: crate::dynamo::DynamoTable,
}

impl DynamoReadings {
    /// `table`, through `client`.
    pub fn new(client: &Client, table: &str) -> Self {
        Self {
            reads: DynamoReadingSource::new(client.clone(), table),
            writes: crate::dynamo::DynamoTable::new(client, table),
        }
    }
}

impl ReadingSource for DynamoReadings {
    fn query_page(
        &self,
        request: &PageRequest,
    ) -> impl Future<Output = Result<Page, StoreError>> + Send {
        self.reads.query_page(request)
    }

    fn get_reading(
        &self,
        key: &ItemKey,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<ReadingItem>, StoreError>> + Send {
        self.reads.get_reading(key, consistent)
    }

    fn query_items(
        &self,
        request: &ItemsRequest,
    ) -> impl Future<Output = Result<ItemsPage, StoreError>> + Send {
        self.reads.query_items(request)
    }
}

impl crate::batch::BatchTable for DynamoReadings {
    fn batch_write(
        &self,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send {
        self.writes.batch_write(items)
    }
}

fn start_key_map(start: &LastKey) -> HashMap<String, AttributeValue> {
    let mut map = key_map(&start.key);
    if let Some(ts) = start.ts_ms {
        map.insert(TS_MS.to_string(), AttributeValue::N(ts.to_string()));
    }
    map
}

fn last_key(map: &HashMap<String, AttributeValue>) -> Result<LastKey, StoreError> {
    let get = |name: &str| match map.get(name) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        _ => Err(StoreError::Malformed(format!(
            "LastEvaluatedKey without a string {name}"
        ))),
    };
    let ts_ms = match map.get(TS_MS) {
        None => None,
        Some(AttributeValue::N(n)) => Some(n.parse().map_err(|_| {
            StoreError::Malformed(format!("LastEvaluatedKey with a bad ts_ms {n:?}"))
        })?),
        Some(_) => {
            return Err(StoreError::Malformed(
                "LastEvaluatedKey with a non-number ts_ms".into(),
            ));
        }
    };
    Ok(LastKey {
        key: ItemKey {
            pk: get(PK)?,
            sk: get(SK)?,
        },
        ts_ms,
    })
}

fn query_error(err: &SdkError<QueryError>) -> StoreError {
    let reasons: &[ThrottlingReason] = match err.as_service_error() {
        Some(QueryError::ProvisionedThroughputExceededException(e)) => e.throttling_reasons(),
        Some(QueryError::ThrottlingException(e)) => e.throttling_reasons(),
        Some(QueryError::RequestLimitExceeded(e)) => e.throttling_reasons(),
        _ => &[],
    };
    StoreError::from_sdk(err, reasons)
}

fn get_error(err: &SdkError<GetItemError>) -> StoreError {
    let reasons: &[ThrottlingReason] = match err.as_service_error() {
        Some(GetItemError::ProvisionedThroughputExceededException(e)) => e.throttling_reasons(),
        Some(GetItemError::ThrottlingException(e)) => e.throttling_reasons(),
        Some(GetItemError::RequestLimitExceeded(e)) => e.throttling_reasons(),
        _ => &[],
    };
    StoreError::from_sdk(err, reasons)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;

    fn stored(sk: &str, ts_ms: i64) -> HashMap<String, AttributeValue> {
        let s = |v: &str| AttributeValue::S(v.to_string());
        HashMap::from([
            ("PK".to_string(), s("dev-1#0")),
            ("SK".to_string(), s(sk)),
            ("device_id".to_string(), s("dev-1")),
            ("event_id".to_string(), s("e1")),
            ("ts".to_string(), s("2026-06-22T00:00:00.000Z")),
            ("ts_ms".to_string(), AttributeValue::N(ts_ms.to_string())),
            (
                "metrics".to_string(),
                AttributeValue::M(HashMap::from([(
                    "t".to_string(),
                    AttributeValue::N("1.5".into()),
                )])),
            ),
            ("ttl".to_string(), AttributeValue::N("1".into())),
        ])
    }

    fn item_key(sk: &str) -> ItemKey {
        ItemKey {
            pk: "dev-1#0".into(),
            sk: sk.into(),
        }
    }

    fn last_key_at(sk: &str, ts_ms: Option<i64>) -> LastKey {
        LastKey {
            key: item_key(sk),
            ts_ms,
        }
    }

    fn request() -> PageRequest {
        PageRequest {
            pk: "dev-1#0".into(),
            sk_between: Some(("a".into(), "b~".into())),
            ts_ms_between: Some((10, 19)),
            limit: Some(7),
            ascending: false,
            start_after: Some(last_key_at("a5", None)),
            consistent: true,
            time_index: None,
        }
    }

    #[tokio::test]
    async fn a_page_request_becomes_one_query() {
        let rule = mock!(Client::query)
            .match_requests(|q| {
                let values = q.expression_attribute_values().expect("values");
                let names = q.expression_attribute_names().expect("names");
                q.table_name() == Some("readings")
                    && q.key_condition_expression()
                        == Some("#pk = :pk AND #sk BETWEEN :sklo AND :skhi")
                    && q.filter_expression() == Some("#ts BETWEEN :tslo AND :tshi")
                    && names.get("#ts").map(String::as_str) == Some("ts_ms")
                    && values.get(":sklo") == Some(&AttributeValue::S("a".into()))
                    && values.get(":tshi") == Some(&AttributeValue::N("19".into()))
                    && q.limit() == Some(7)
                    && q.scan_index_forward() == Some(false)
                    && q.consistent_read() == Some(true)
                    && q.exclusive_start_key().and_then(|k| k.get("SK"))
                        == Some(&AttributeValue::S("a5".into()))
            })
            .then_output(|| {
                QueryOutput::builder()
                    .items(stored("a4", 12))
                    .scanned_count(3)
                    .count(1)
                    .set_last_evaluated_key(Some(HashMap::from([
                        ("PK".to_string(), AttributeValue::S("dev-1#0".into())),
                        ("SK".to_string(), AttributeValue::S("a2".into())),
                    ])))
                    .build()
            });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let page = DynamoReadingSource::new(client, "readings")
            .query_page(&request())
            .await
            .expect("page");
        assert_eq!(rule.num_calls(), 1);
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].sk, "a4");
        assert_eq!(
            page.items[0].metrics.get("t").map(|t| t.as_str()),
            Some("1.5")
        );
        assert_eq!(page.items_read, 3);
        assert_eq!(page.last_key, Some(last_key_at("a2", None)));
    }

    #[tokio::test]
    async fn a_time_index_request_bounds_the_time_in_the_key_condition() {
        let rule = mock!(Client::query)
            .match_requests(|q| {
                let values = q.expression_attribute_values().expect("values");
                let start = q.exclusive_start_key().expect("start key");
                q.index_name() == Some("by-time")
                    && q.key_condition_expression()
                        == Some("#pk = :pk AND #ts BETWEEN :tslo AND :tshi")
                    && q.filter_expression().is_none()
                    && values.get(":tslo") == Some(&AttributeValue::N("10".into()))
                    && values.get(":tshi") == Some(&AttributeValue::N("19".into()))
                    && start.get("ts_ms") == Some(&AttributeValue::N("11".into()))
                    && start.get("SK") == Some(&AttributeValue::S("a5".into()))
            })
            .then_output(|| {
                QueryOutput::builder()
                    .items(stored("a4", 12))
                    .scanned_count(1)
                    .count(1)
                    .set_last_evaluated_key(Some(HashMap::from([
                        ("PK".to_string(), AttributeValue::S("dev-1#0".into())),
                        ("SK".to_string(), AttributeValue::S("a4".into())),
                        ("ts_ms".to_string(), AttributeValue::N("12".into())),
                    ])))
                    .build()
            });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let by_time = PageRequest {
            sk_between: None,
            time_index: Some("by-time".into()),
            start_after: Some(last_key_at("a5", Some(11))),
            ..request()
        };
        let page = DynamoReadingSource::new(client, "readings")
            .query_page(&by_time)
            .await
            .expect("page");
        assert_eq!(rule.num_calls(), 1);
        assert_eq!(page.last_key, Some(last_key_at("a4", Some(12))));
        // Sort-key bounds cannot apply to the index: refused before any call.
        let refused = DynamoReadingSource::new(
            mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]),
            "readings",
        )
        .query_page(&PageRequest {
            time_index: Some("by-time".into()),
            ..request()
        })
        .await;
        assert!(
            matches!(refused, Err(StoreError::Malformed(_))),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn a_bare_request_sends_no_bounds_filter_or_limit() {
        let rule = mock!(Client::query)
            .match_requests(|q| {
                q.key_condition_expression() == Some("#pk = :pk")
                    && q.filter_expression().is_none()
                    && q.limit().is_none()
                    && q.exclusive_start_key().is_none()
                    && q.scan_index_forward() == Some(true)
            })
            .then_output(|| QueryOutput::builder().scanned_count(0).build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let bare = PageRequest {
            sk_between: None,
            ts_ms_between: None,
            limit: None,
            ascending: true,
            start_after: None,
            consistent: false,
            ..request()
        };
        let page = DynamoReadingSource::new(client, "readings")
            .query_page(&bare)
            .await
            .expect("page");
        assert_eq!(rule.num_calls(), 1);
        assert!(page.items.is_empty() && page.last_key.is_none());
    }

    #[tokio::test]
    async fn a_failed_call_is_retried_twice_within_a_fraction_of_a_second() {
        let rule = mock!(Client::query)
            .sequence()
            .http_status(500, None)
            .times(2)
            .output(|| QueryOutput::builder().scanned_count(0).build())
            .build();
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&rule]);
        let started = std::time::Instant::now();
        let page = DynamoReadingSource::new(client, "readings")
            .query_page(&request())
            .await
            .expect("the third attempt answers");
        assert_eq!(rule.num_calls(), 3);
        assert!(page.items.is_empty());
        // Backoffs of at most 50 ms and 100 ms, where the SDK's default waits up to 3 s.
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_throttle_is_classified_with_its_reason() {
        let rule = mock!(Client::query).then_error(|| {
            QueryError::ProvisionedThroughputExceededException(
                crate::error::tests::read_key_range_exceeded(),
            )
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let err = DynamoReadingSource::new(client, "readings")
            .query_page(&request())
            .await
            .expect_err("throttled");
        assert!(err.is_key_range_throttle(), "{err:?}");
        assert!(err.is_retryable());
    }

    #[tokio::test]
    async fn a_malformed_item_is_reported_not_skipped() {
        let rule = mock!(Client::query).then_output(|| {
            let mut item = stored("a4", 12);
            item.remove("ts_ms");
            QueryOutput::builder().items(item).scanned_count(1).build()
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let err = DynamoReadingSource::new(client, "readings")
            .query_page(&request())
            .await
            .expect_err("malformed");
        assert!(matches!(err, StoreError::Malformed(_)), "{err:?}");
    }

    fn block_of(sk_ts: &[(i64, &str)]) -> BlockItem {
        let members: Vec<crate::item::Reading> = sk_ts
            .iter()
            .map(|(ts_ms, id)| crate::item::Reading {
                device_id: "dev-1".into(),
                event_id: (*id).into(),
                ts: Timestamp::from_millis(*ts_ms).expect("in range"),
                metrics: std::collections::BTreeMap::from([(
                    "t".to_owned(),
                    "1.5".parse().expect("a number"),
                )]),
                tags: std::collections::BTreeMap::new(),
                written: crate::WriteOrder::OLDEST,
            })
            .collect();
        BlockItem::new(
            &members,
            &item_key("dev-1#2026-06-22T00:00:00.000Z#e1"),
            Duration::from_secs(60),
        )
        .expect("a block")
    }

    #[tokio::test]
    async fn a_page_of_blocks_is_expanded_and_keeps_its_last_sort_time() {
        const T: i64 = 1_782_086_400_000;
        let rule = mock!(Client::query).then_output(|| {
            let block = block_of(&[(T + 20, "e2"), (T + 25, "e3"), (T + 90, "e4")]);
            QueryOutput::builder()
                .items(stored("a4", T + 10))
                .items(block.to_item().expect("item"))
                .scanned_count(2)
                .count(2)
                .build()
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let page = DynamoReadingSource::new(client, "readings")
            .query_page(&request())
            .await
            .expect("page");
        let ids: Vec<&str> = page.items.iter().map(|i| i.event_id.as_str()).collect();
        assert_eq!(ids, ["e1", "e2", "e3", "e4"]);
        assert_eq!(page.items[3].ts_ms, T + 90);
        assert_eq!(page.items_read, 2, "a block is one item evaluated");
        assert_eq!(page.last_ts, Some(T + 20), "the block's first member's");
    }

    #[tokio::test]
    async fn an_empty_page_takes_its_sort_time_from_its_last_key() {
        let key = |ts: Option<&str>| {
            let mut k = HashMap::from([
                ("PK".to_string(), AttributeValue::S("dev-1#0".into())),
                ("SK".to_string(), AttributeValue::S("a4".into())),
            ]);
            if let Some(ts) = ts {
                k.insert("ts_ms".to_string(), AttributeValue::N(ts.into()));
            }
            k
        };
        let on_index = mock!(Client::query).then_output(move || {
            QueryOutput::builder()
                .scanned_count(1)
                .set_last_evaluated_key(Some(key(Some("12"))))
                .build()
        });
        let on_table = mock!(Client::query).then_output(move || {
            QueryOutput::builder()
                .scanned_count(1)
                .set_last_evaluated_key(Some(key(None)))
                .build()
        });
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&on_index, &on_table]
        );
        let source = DynamoReadingSource::new(client, "readings");
        let page = source.query_page(&request()).await.expect("page");
        assert_eq!(page.last_ts, Some(12));
        let page = source.query_page(&request()).await.expect("page");
        assert_eq!(page.last_ts, None, "a4 carries no time");
        // A table's key carries its item's time in its sort key, a block's too.
        let sk = "dev-1#2026-06-22T00:00:01.000Z#e1";
        let at = |sk: &str| last_key_at(sk, None).sort_time();
        assert_eq!(at(sk), Some(1_782_086_401_000));
        assert_eq!(
            at("dev-1#b#2026-06-22T00:00:01.000Z#e1#0123456789abcdef"),
            Some(1_782_086_401_000)
        );
        assert_eq!(at("2026-06-22T00:00:01.000Z#e1"), Some(1_782_086_401_000));
        assert_eq!(at("dev-1#e1"), None);
    }

    #[tokio::test]
    async fn a_malformed_block_is_reported_not_skipped() {
        let rule = mock!(Client::query).then_output(|| {
            let mut block = block_of(&[(1_000, "e1"), (1_005, "e2")]);
            block.n = 3;
            QueryOutput::builder()
                .items(block.to_item().expect("item"))
                .scanned_count(1)
                .build()
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let err = DynamoReadingSource::new(client, "readings")
            .query_page(&request())
            .await
            .expect_err("malformed");
        assert!(matches!(err, StoreError::Malformed(_)), "{err:?}");
    }

    #[tokio::test]
    async fn an_items_request_bounds_the_sort_key_from_above_and_returns_items_as_stored() {
        let bounded = mock!(Client::query)
            .match_requests(|q| {
                let values = q.expression_attribute_values().expect("values");
                q.key_condition_expression() == Some("#pk = :pk AND #sk <= :skhi")
                    && values.get(":skhi") == Some(&AttributeValue::S("dev-1#~".into()))
                    && q.filter_expression().is_none()
                    && q.limit() == Some(4)
                    && q.scan_index_forward() == Some(false)
                    && q.exclusive_start_key().and_then(|k| k.get("SK"))
                        == Some(&AttributeValue::S("dev-1#x".into()))
            })
            .then_output(|| {
                QueryOutput::builder()
                    .items(stored("dev-0#2026-06-22T00:01#0000", 12))
                    .scanned_count(1)
                    .set_last_evaluated_key(Some(HashMap::from([
                        (
                            "PK".to_string(),
                            AttributeValue::S("r#3#2026-06-22T00".into()),
                        ),
                        (
                            "SK".to_string(),
                            AttributeValue::S("dev-0#2026-06-22T00:01#0000".into()),
                        ),
                    ])))
                    .build()
            });
        let whole = mock!(Client::query)
            .match_requests(|q| {
                q.key_condition_expression() == Some("#pk = :pk")
                    && q.limit().is_none()
                    && q.exclusive_start_key().is_none()
            })
            .then_output(|| QueryOutput::builder().scanned_count(0).build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&bounded, &whole]);
        let source = DynamoReadingSource::new(client, "readings");
        let request = ItemsRequest {
            pk: "r#3#2026-06-22T00".into(),
            sk_at_most: Some("dev-1#~".into()),
            limit: Some(4),
            ascending: false,
            start_after: Some(ItemKey {
                pk: "r#3#2026-06-22T00".into(),
                sk: "dev-1#x".into(),
            }),
            consistent: false,
        };
        let page = source.query_items(&request).await.expect("page");
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].sk, "dev-0#2026-06-22T00:01#0000");
        assert_eq!(
            page.items[0].item,
            stored("dev-0#2026-06-22T00:01#0000", 12)
        );
        assert_eq!(page.items_read, 1);
        assert_eq!(
            page.last_key.map(|k| k.sk),
            Some("dev-0#2026-06-22T00:01#0000".to_owned())
        );
        let all = ItemsRequest {
            sk_at_most: None,
            limit: None,
            start_after: None,
            ..request
        };
        let page = source.query_items(&all).await.expect("page");
        assert!(page.items.is_empty() && page.last_key.is_none());
        assert_eq!((bounded.num_calls(), whole.num_calls()), (1, 1));
    }

    #[tokio::test]
    async fn get_reading_by_key() {
        let found = mock!(Client::get_item)
            .match_requests(|g| {
                g.consistent_read() == Some(false)
                    && g.key().and_then(|k| k.get("SK")) == Some(&AttributeValue::S("a4".into()))
            })
            .then_output(|| {
                GetItemOutput::builder()
                    .set_item(Some(stored("a4", 12)))
                    .build()
            });
        let missing = mock!(Client::get_item).then_output(|| GetItemOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&found, &missing]);
        let source = DynamoReadingSource::new(client, "readings");
        let key = item_key("a4");
        let item = source.get_reading(&key, false).await.expect("ok");
        assert_eq!(item.map(|i| i.ts_ms), Some(12));
        assert_eq!(source.get_reading(&key, false).await.expect("ok"), None);
    }
}
