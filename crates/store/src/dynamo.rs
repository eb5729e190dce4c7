//! DynamoDB adapters of the ports.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemError;
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use serde::{Deserialize, Serialize};
use sharding::epoch::{Epoch, FanoutHistory, TableHistory};
use sharding::fanout::ShardMeta;
use sharding::time::Timestamp;

use crate::batch::{BatchTable, Item, PK};
use crate::directory::{ShardReader, ShardStore, UpdateCondition};
use crate::error::StoreError;

/// The readings table behind [`BatchTable`].
#[derive(Debug, Clone)]
pub struct DynamoTable {
    client: Client,
    table: String,
}

impl DynamoTable {
    /// An adapter writing to `table`. The SDK's own retries are switched off on this
    /// client: the batch writer retries with its own budget and deadline, and a second
    /// retry layer underneath would multiply attempts and overrun the deadline.
    pub fn new(client: &Client, table: impl Into<String>) -> Self {
        let config = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        Self {
            client: Client::from_conf(config),
            table: table.into(),
        }
    }

    /// The table name.
    pub fn table_name(&self) -> &str {
        &self.table
    }
}

fn classify_batch_error(err: &SdkError<BatchWriteItemError>) -> StoreError {
    let reasons = match err.as_service_error() {
        Some(BatchWriteItemError::ProvisionedThroughputExceededException(e)) => {
            e.throttling_reasons()
        }
        Some(BatchWriteItemError::ThrottlingException(e)) => e.throttling_reasons(),
        Some(BatchWriteItemError::RequestLimitExceeded(e)) => e.throttling_reasons(),
        _ => &[],
    };
    StoreError::from_sdk(err, reasons)
}

impl BatchTable for DynamoTable {
    #[tracing::instrument(skip_all, fields(table = %self.table, items = items.len()))]
    async fn batch_write(&self, items: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let requests = items
            .into_iter()
            .map(|item| {
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map(|put| WriteRequest::builder().put_request(put).build())
                    .map_err(|e| StoreError::Validation(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let output = self
            .client
            .batch_write_item()
            .request_items(&self.table, requests)
            .send()
            .await
            .map_err(|e| {
                let err = classify_batch_error(&e);
                tracing::debug!(error = %err, "BatchWriteItem failed");
                err
            })?;
        let unprocessed = output
            .unprocessed_items()
            .and_then(|by_table| by_table.get(&self.table))
            .map(|requests| {
                requests
                    .iter()
                    .filter_map(|r| r.put_request().map(|p| p.item().clone()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(unprocessed)
    }
}

/// The shard metadata table behind [`ShardStore`] (schema in the crate docs).
#[derive(Debug, Clone)]
pub struct DynamoShards {
    client: Client,
    table: String,
}

const LAYOUT_PK: &str = "layout";
const HOT_PK: &str = "hot";

fn entity_pk(entity: &str) -> String {
    format!("entity#{entity}")
}

/// One entry of `shard_history`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct HistoryEntry {
    effective_from: i64,
    k: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct EntityItem {
    #[serde(rename = "PK")]
    pk: String,
    number_of_shards: u32,
    last_updated: i64,
    #[serde(default)]
    shard_history: Vec<HistoryEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_hot: Option<i64>,
}

impl EntityItem {
    fn from_meta(entity: &str, meta: &ShardMeta) -> Self {
        Self {
            pk: entity_pk(entity),
            number_of_shards: meta.number_of_shards,
            last_updated: meta.last_updated.as_millis(),
            shard_history: meta
                .shard_history
                .epochs()
                .iter()
                .map(|e| HistoryEntry {
                    effective_from: e.effective_from.as_millis(),
                    k: e.value,
                })
                .collect(),
            last_hot: meta.last_hot.map(Timestamp::as_millis),
        }
    }

    fn into_meta(self) -> Result<ShardMeta, StoreError> {
        let malformed = |what: String| StoreError::Malformed(format!("{}: {what}", self.pk));
        let epochs = self
            .shard_history
            .iter()
            .map(|e| {
                Timestamp::from_millis(e.effective_from).map(|effective_from| Epoch {
                    effective_from,
                    value: e.k,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| malformed(e.to_string()))?;
        Ok(ShardMeta {
            number_of_shards: self.number_of_shards,
            last_updated: Timestamp::from_millis(self.last_updated)
                .map_err(|e| malformed(e.to_string()))?,
            shard_history: FanoutHistory::from_epochs(epochs)
                .map_err(|e| malformed(e.to_string()))?,
            last_hot: self
                .last_hot
                .map(Timestamp::from_millis)
                .transpose()
                .map_err(|e| malformed(e.to_string()))?,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct LayoutItem {
    #[serde(rename = "PK")]
    pk: String,
    epochs: TableHistory,
}

#[derive(Debug, Deserialize)]
struct HotItem {
    #[serde(default, with = "serde_dynamo::string_set")]
    entities: BTreeSet<String>,
}

fn classify<E>(err: &SdkError<E>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    StoreError::from_sdk(err, &[])
}

/// The answer of a conditional write: `true` if written, `false` if its condition
/// failed, or the classified error.
fn conditional<T, E>(result: Result<T, SdkError<E>>) -> Result<bool, StoreError>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) => match classify(&e) {
            StoreError::ConditionFailed => Ok(false),
            other => Err(other),
        },
    }
}

fn to_item<T: Serialize>(value: &T) -> Result<Item, StoreError> {
    serde_dynamo::to_item(value).map_err(|e| StoreError::Malformed(e.to_string()))
}

fn from_item<T: for<'de> Deserialize<'de>>(item: Item) -> Result<T, StoreError> {
    serde_dynamo::from_item(item).map_err(|e| StoreError::Malformed(e.to_string()))
}

impl DynamoShards {
    /// An adapter over the metadata table `table`.
    pub fn new(client: &Client, table: impl Into<String>) -> Self {
        Self {
            client: client.clone(),
            table: table.into(),
        }
    }

    async fn get(&self, pk: String) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(pk))
            // A raise decision on a stale read only loses its race; a layout read must
            // not miss the layout a concurrent writer just stored.
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(&e))?;
        Ok(output.item)
    }

    async fn put_if_absent(&self, item: Item) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .send()
            .await;
        conditional(result)
    }
}

impl ShardReader for DynamoShards {
    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn get_entity(&self, entity: &str) -> Result<Option<ShardMeta>, StoreError> {
        match self.get(entity_pk(entity)).await? {
            Some(item) => Ok(Some(from_item::<EntityItem>(item)?.into_meta()?)),
            None => Ok(None),
        }
    }

    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn get_layout(&self) -> Result<Option<TableHistory>, StoreError> {
        match self.get(LAYOUT_PK.to_owned()).await? {
            Some(item) => Ok(Some(from_item::<LayoutItem>(item)?.epochs)),
            None => Ok(None),
        }
    }

    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn hot_entities(&self) -> Result<BTreeSet<String>, StoreError> {
        match self.get(HOT_PK.to_owned()).await? {
            Some(item) => Ok(from_item::<HotItem>(item)?.entities),
            None => Ok(BTreeSet::new()),
        }
    }
}

impl ShardStore for DynamoShards {
    #[tracing::instrument(skip(self, meta), fields(table = %self.table))]
    async fn create_entity(&self, entity: &str, meta: &ShardMeta) -> Result<bool, StoreError> {
        self.put_if_absent(to_item(&EntityItem::from_meta(entity, meta))?)
            .await
    }

    #[tracing::instrument(skip(self, meta), fields(table = %self.table))]
    async fn update_entity(
        &self,
        entity: &str,
        condition: &UpdateCondition,
        meta: &ShardMeta,
    ) -> Result<bool, StoreError> {
        if meta.shard_history.ever_fanned_out() {
            // The hot set first: ADD is idempotent, so a change that then loses its race
            // leaves at most a superset (an entity a read plan checks for nothing), while
            // the opposite order could leave a raised entity that read plans never see.
            self.client
                .update_item()
                .table_name(&self.table)
                .key(PK, AttributeValue::S(HOT_PK.to_owned()))
                .update_expression("ADD entities :e")
                .expression_attribute_values(":e", AttributeValue::Ss(vec![entity.to_owned()]))
                .send()
                .await
                .map_err(|e| classify(&e))?;
        }
        let item = EntityItem::from_meta(entity, meta);
        let history = serde_dynamo::to_attribute_value(&item.shard_history)
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        let number = |n: i64| AttributeValue::N(n.to_string());
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(item.pk.clone()))
            .expression_attribute_values(":expected", number(condition.last_updated.as_millis()))
            .expression_attribute_values(":k", number(i64::from(item.number_of_shards)))
            .expression_attribute_values(":now", number(item.last_updated))
            .expression_attribute_values(":history", history);
        let mut set =
            "SET number_of_shards = :k, last_updated = :now, shard_history = :history".to_owned();
        if let Some(hot) = item.last_hot {
            set.push_str(", last_hot = :hot");
            request = request.expression_attribute_values(":hot", number(hot));
        }
        let mut condition_expression = "last_updated = :expected".to_owned();
        if let Some(quiet_since) = condition.quiet_since {
            condition_expression
                .push_str(" AND (attribute_not_exists(last_hot) OR last_hot < :quiet)");
            request =
                request.expression_attribute_values(":quiet", number(quiet_since.as_millis()));
        }
        let result = request
            .update_expression(set)
            .condition_expression(condition_expression)
            .send()
            .await;
        conditional(result)
    }

    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn mark_hot(&self, entity: &str, at: Timestamp) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(entity_pk(entity)))
            .update_expression("SET last_hot = :at")
            // Never create an item, and never move the mark back in time.
            .condition_expression(
                "attribute_exists(#pk) AND (attribute_not_exists(last_hot) OR last_hot < :at)",
            )
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":at", AttributeValue::N(at.as_millis().to_string()))
            .send()
            .await;
        // A failed condition: a later mark is already there, or no item to mark.
        conditional(result).map(|_| ())
    }

    #[tracing::instrument(skip(self, history), fields(table = %self.table))]
    async fn create_layout(&self, history: &TableHistory) -> Result<bool, StoreError> {
        self.put_if_absent(to_item(&LayoutItem {
            pk: LAYOUT_PK.to_owned(),
            epochs: history.clone(),
        })?)
        .await
    }
}
