//! Whole-table reads: one page of one DynamoDB Scan behind a narrow port, so that
//! `shardline audit` reads a table (the readings table, or any other it is pointed at)
//! through DynamoDB or the in-memory fake, [`crate::memory::MemoryScan`].
//!
//! A page reports, of each item, what a key audit needs: the values of three named
//! attributes (partition key, sort key, time) and the item's size by DynamoDB's rule
//! ([`crate::size::item_size`]), so no SDK type crosses the port. The time attribute is
//! read as epoch milliseconds from a number, or from an RFC 3339 string.
//!
//! [`scan_items`] is the SDK-level read of a whole table into its items, for tallies
//! and tests that look at every attribute.

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::scan::ScanError;
use aws_sdk_dynamodb::operation::scan::builders::ScanFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ThrottlingReason};
use sharding::time::Timestamp;
use tracing::instrument;

use crate::error::StoreError;
use crate::item::{PK, SK};
use crate::size::item_size;

/// Names of the attributes a scan reports of each item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanAttributes {
    /// The partition key.
    pub pk: String,
    /// The sort key; an item without it is still reported.
    pub sk: String,
    /// The time: a number of epoch milliseconds or an RFC 3339 string.
    pub ts: String,
}

impl ScanAttributes {
    /// The readings table's: `PK`, `SK` and `ts_ms`.
    pub fn readings() -> Self {
        Self {
            pk: PK.to_owned(),
            sk: SK.to_owned(),
            ts: "ts_ms".to_owned(),
        }
    }
}

/// One page of one Scan.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanRequest {
    /// What to report of each item.
    pub attributes: ScanAttributes,
    /// Continue after this key, from the previous page's [`ScanPage::last_key`];
    /// `None` starts at the beginning of the table.
    pub start_after: Option<ScanKey>,
}

/// What a scan reports of one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedItem {
    /// The partition key's value; `None` when the item has no such string attribute.
    pub pk: Option<String>,
    /// The sort key's value; `None` when the item has no such string attribute.
    pub sk: Option<String>,
    /// The time attribute in epoch milliseconds; `None` when the item has none, or one
    /// that is neither a number nor an RFC 3339 string.
    pub ts_ms: Option<i64>,
    /// The whole item's size, bytes.
    pub bytes: usize,
    /// Where the item is a block (`crate::block`), a slab or a run (`crate::slab`), each
    /// member's sort key as it would be alone (`{device}#{ts}#{event id}`); empty for
    /// any other item, and for one that breaks its format.
    pub members: Vec<String>,
    /// What kind of item holds them.
    pub tier: Tier,
}

/// What kind of item of the readings table a scanned item is (docs/design-slabs.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tier {
    /// A device's own: one reading, a block, or an item of no reading at all.
    #[default]
    Own,
    /// A slab: a batch's readings of a slab group's window.
    Slab,
    /// A run: a compacted window's readings of a slab group, which stand for the
    /// window's slabs.
    Run,
}

/// The answer to one [`ScanRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct ScanPage {
    /// The page's items, in the table's scan order.
    pub items: Vec<ScannedItem>,
    /// Present when the scan stopped early (1 MB, or the fake's page size), even when
    /// nothing follows; absent when the table is read to its end.
    pub last_key: Option<ScanKey>,
}

/// Where a scan's next page starts (DynamoDB's `LastEvaluatedKey`): opaque to callers,
/// who hand it back as the next request's [`ScanRequest::start_after`].
#[derive(Debug, Clone, PartialEq)]
pub struct ScanKey(pub(crate) StartKey);

/// The inside of a [`ScanKey`], for the table that gave it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StartKey {
    /// A DynamoDB table's key attributes.
    Dynamo(HashMap<String, AttributeValue>),
    /// The in-memory fake's position: how many of its items were evaluated.
    Position(usize),
}

/// The scan port of a table.
pub trait TableScan: Send + Sync {
    /// Reads one page of one Scan.
    fn scan_page(
        &self,
        request: &ScanRequest,
    ) -> impl Future<Output = Result<ScanPage, StoreError>> + Send;
}

impl<T: TableScan> TableScan for &T {
    fn scan_page(
        &self,
        request: &ScanRequest,
    ) -> impl Future<Output = Result<ScanPage, StoreError>> + Send {
        (**self).scan_page(request)
    }
}

/// What a scan reports of `item` under `attributes` (the adapter's and the fake's
/// reading of an item alike).
pub(crate) fn scanned(
    item: &HashMap<String, AttributeValue>,
    attributes: &ScanAttributes,
) -> ScannedItem {
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    let ts_ms = match item.get(&attributes.ts) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        Some(AttributeValue::S(s)) => Timestamp::parse(s).ok().map(Timestamp::as_millis),
        _ => None,
    };
    let pk = string(&attributes.pk);
    let tier = match &pk {
        _ if !crate::slab::is_slab(item) => Tier::Own,
        Some(pk) if pk.starts_with(sharding::slab::RUN_PREFIX) => Tier::Run,
        _ => Tier::Slab,
    };
    let members = if tier != Tier::Own || crate::block::is_block(item) {
        crate::block::expand(item.clone())
            .map(|readings| readings.into_iter().map(|r| r.sk).collect())
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    ScannedItem {
        pk,
        sk: string(&attributes.sk),
        ts_ms,
        bytes: item_size(item),
        members,
        tier,
    }
}

/// [`TableScan`] on a DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoScan {
    client: Client,
    table: String,
}

impl DynamoScan {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }
}

impl TableScan for DynamoScan {
    #[instrument(skip_all, fields(table = %self.table, start = request.start_after.is_some()))]
    async fn scan_page(&self, request: &ScanRequest) -> Result<ScanPage, StoreError> {
        let start = match &request.start_after {
            None => None,
            Some(ScanKey(StartKey::Dynamo(key))) => Some(key.clone()),
            Some(ScanKey(StartKey::Position(_))) => {
                return Err(StoreError::Validation(
                    "the scan key comes from another table".to_owned(),
                ));
            }
        };
        let out = self
            .client
            .scan()
            .table_name(&self.table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| scan_error(&e))?;
        let items: Vec<ScannedItem> = out
            .items()
            .iter()
            .map(|item| scanned(item, &request.attributes))
            .collect();
        // An empty key ends the scan as an absent one does (as the SDK's paginator reads it).
        let last_key = out
            .last_evaluated_key
            .filter(|key| !key.is_empty())
            .map(|key| ScanKey(StartKey::Dynamo(key)));
        tracing::debug!(
            returned = items.len(),
            more = last_key.is_some(),
            "scan page"
        );
        Ok(ScanPage { items, last_key })
    }
}

/// Every item `scan` returns, over all its pages (the SDK's paginator follows
/// `LastEvaluatedKey`): the one way the workspace reads a whole table's items, for
/// tallies and tests. The caller sets the table and any projection, filter or
/// consistency on the builder.
pub async fn scan_items(
    scan: ScanFluentBuilder,
) -> Result<Vec<HashMap<String, AttributeValue>>, StoreError> {
    scan.into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| scan_error(&e))
}

fn scan_error(err: &SdkError<ScanError>) -> StoreError {
    let reasons: &[ThrottlingReason] = match err.as_service_error() {
        Some(ScanError::ProvisionedThroughputExceededException(e)) => e.throttling_reasons(),
        Some(ScanError::ThrottlingException(e)) => e.throttling_reasons(),
        Some(ScanError::RequestLimitExceeded(e)) => e.throttling_reasons(),
        _ => &[],
    };
    StoreError::from_sdk(err, reasons)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::scan::ScanOutput;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn item(pk: &str, sk: &str, ts: AttributeValue) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("PK".to_owned(), s(pk)),
            ("SK".to_owned(), s(sk)),
            ("ts_ms".to_owned(), ts),
        ])
    }

    #[test]
    fn an_item_reports_its_keys_time_and_size() {
        let attributes = ScanAttributes::readings();
        let numbered = item("dev-1#0", "a", AttributeValue::N("1000".into()));
        assert_eq!(
            scanned(&numbered, &attributes),
            ScannedItem {
                pk: Some("dev-1#0".into()),
                sk: Some("a".into()),
                ts_ms: Some(1000),
                bytes: item_size(&numbered),
                members: Vec::new(),
                tier: Tier::Own,
            }
        );
        let dated = item("k", "a", s("1970-01-01T00:00:01.000Z"));
        assert_eq!(scanned(&dated, &attributes).ts_ms, Some(1000));
        let mut odd = item("k", "a", s("yesterday"));
        odd.insert("PK".into(), AttributeValue::N("7".into()));
        let odd = scanned(&odd, &attributes);
        assert_eq!((odd.pk, odd.ts_ms), (None, None));
    }

    #[tokio::test]
    async fn pages_follow_the_last_evaluated_key() {
        let first = mock!(Client::scan)
            .match_requests(|r| r.table_name() == Some("t") && r.exclusive_start_key().is_none())
            .then_output(|| {
                ScanOutput::builder()
                    .items(item("a", "1", AttributeValue::N("5".into())))
                    .set_last_evaluated_key(Some(HashMap::from([("PK".into(), s("a"))])))
                    .build()
            });
        let second = mock!(Client::scan)
            .match_requests(|r| r.exclusive_start_key().and_then(|k| k.get("PK")) == Some(&s("a")))
            .then_output(|| ScanOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&first, &second]);
        let scan = DynamoScan::new(client, "t");
        let mut request = ScanRequest {
            attributes: ScanAttributes::readings(),
            start_after: None,
        };
        let page = scan.scan_page(&request).await.expect("first page");
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].ts_ms, Some(5));
        request.start_after = page.last_key;
        assert!(request.start_after.is_some());
        let page = scan.scan_page(&request).await.expect("second page");
        assert!(page.items.is_empty() && page.last_key.is_none());
        assert_eq!((first.num_calls(), second.num_calls()), (1, 1));
    }

    #[tokio::test]
    async fn a_throttled_scan_is_classified_with_its_reason() {
        let rule = mock!(Client::scan).then_error(|| {
            ScanError::ProvisionedThroughputExceededException(
                crate::error::tests::read_key_range_exceeded(),
            )
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let err = DynamoScan::new(client, "t")
            .scan_page(&ScanRequest {
                attributes: ScanAttributes::readings(),
                start_after: None,
            })
            .await
            .expect_err("throttled");
        assert!(err.is_key_range_throttle(), "{err:?}");
    }
}
