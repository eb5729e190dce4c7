//! DynamoDB adapters of the ports.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, PutRequest, WriteRequest};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use sharding::backoff::Backoff;
use sharding::epoch::{Epoch, FanoutHistory, TableHistory};
use sharding::fanout::ShardMeta;
use sharding::time::Timestamp;

use crate::batch::{BatchTable, Item};
use crate::directory::{EntityRecord, HotListing, ShardReader, ShardStore, UpdateCondition};
use crate::error::{StoreError, ThrottleKind};
use crate::item::PK;
use crate::memory::MAX_BATCH_GET_KEYS;
use crate::written::Written;

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
/// The one-item hot set of tables from before the hot index: read, never written.
const LEGACY_HOT_PK: &str = "hot";
/// Prefix of the hot index's items, `hot#{YYYY-MM-DDTHH}`.
const HOT_HOUR_PREFIX: &str = "hot#";

/// Attempts of a `BatchGetItem` at keys DynamoDB left unprocessed.
const BATCH_GET_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(25),
    cap: Duration::from_millis(800),
    max_attempts: 6,
};

/// Hot index items one listing updates at once.
const LIST_CONCURRENCY: usize = 8;

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hot_through: Option<i64>,
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
            hot_through: None,
        }
    }

    fn into_record(self) -> Result<EntityRecord, StoreError> {
        let hot_through = self
            .hot_through
            .map(Timestamp::from_millis)
            .transpose()
            .map_err(|e| StoreError::Malformed(format!("{}: {e}", self.pk)))?;
        Ok(EntityRecord {
            meta: self.into_meta()?,
            hot_through,
        })
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
    #[serde(rename = "PK")]
    pk: String,
    #[serde(default, with = "serde_dynamo::string_set")]
    entities: BTreeSet<String>,
}

pub(crate) fn classify<E>(err: &SdkError<E>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    StoreError::from_sdk(err, &[])
}

/// The answer of a conditional write: [`Written::Applied`], [`Written::Refused`] if its
/// condition failed, or the classified error.
pub(crate) fn conditional<T, E>(result: Result<T, SdkError<E>>) -> Result<Written, StoreError>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    match result {
        Ok(_) => Ok(Written::Applied),
        Err(e) => match classify(&e) {
            StoreError::ConditionFailed => Ok(Written::Refused),
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

    /// The items of `pks` that exist, in `BatchGetItem` calls of at most 100 keys,
    /// strongly consistent; keys left unprocessed are asked again after a full-jitter
    /// back-off, a bounded number of times.
    async fn batch_get(&self, pks: Vec<String>) -> Result<Vec<Item>, StoreError> {
        let mut out = Vec::new();
        for chunk in pks.chunks(MAX_BATCH_GET_KEYS) {
            let mut keys: Vec<Item> = chunk
                .iter()
                .map(|pk| Item::from([(PK.to_owned(), AttributeValue::S(pk.clone()))]))
                .collect();
            let mut attempt = 0;
            while !keys.is_empty() {
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| StoreError::Validation(e.to_string()))?;
                let output = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| classify(&e))?;
                if let Some(items) = output.responses.and_then(|mut r| r.remove(&self.table)) {
                    out.extend(items);
                }
                keys = output
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
                if keys.is_empty() {
                    break;
                }
                // The thread's generator is not held across the sleep (it is not Send).
                let delay = BATCH_GET_BACKOFF.next_delay(attempt, Duration::MAX, &mut rand::rng());
                let Some(delay) = delay else {
                    return Err(StoreError::Throttled {
                        kind: ThrottleKind::Other,
                        reason: format!(
                            "BatchGetItem left {} keys unprocessed after {} attempts",
                            keys.len(),
                            BATCH_GET_BACKOFF.max_attempts
                        ),
                    });
                };
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
        Ok(out)
    }

    /// Adds `entity` to the hot index item of `hour`, with its expiry when given.
    async fn list_hour(
        &self,
        entity: &str,
        hour: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(format!("{HOT_HOUR_PREFIX}{hour}")))
            .expression_attribute_values(":e", AttributeValue::Ss(vec![entity.to_owned()]));
        let mut expression = "ADD entities :e".to_owned();
        if let Some(at) = expires_at {
            // `ttl` is a reserved word; epoch seconds, as DynamoDB's TTL reads them.
            expression.push_str(" SET #ttl = :ttl");
            let secs = at.as_millis().div_euclid(1000);
            request = request
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":ttl", AttributeValue::N(secs.to_string()));
        }
        request
            .update_expression(expression)
            .send()
            .await
            .map_err(|e| classify(&e))?;
        Ok(())
    }

    async fn put_if_absent(&self, item: Item) -> Result<Written, StoreError> {
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
    async fn get_record(&self, entity: &str) -> Result<Option<EntityRecord>, StoreError> {
        match self.get(entity_pk(entity)).await? {
            Some(item) => Ok(Some(from_item::<EntityItem>(item)?.into_record()?)),
            None => Ok(None),
        }
    }

    #[tracing::instrument(skip_all, fields(table = %self.table, entities = entities.len()))]
    async fn get_records(
        &self,
        entities: &[String],
    ) -> Result<Vec<(String, EntityRecord)>, StoreError> {
        let items = self
            .batch_get(entities.iter().map(|e| entity_pk(e)).collect())
            .await?;
        items
            .into_iter()
            .map(|item| {
                let item = from_item::<EntityItem>(item)?;
                let entity = item
                    .pk
                    .strip_prefix("entity#")
                    .ok_or_else(|| StoreError::Malformed(format!("not an entity: {}", item.pk)))?
                    .to_owned();
                Ok((entity, item.into_record()?))
            })
            .collect()
    }

    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn get_layout(&self) -> Result<Option<TableHistory>, StoreError> {
        match self.get(LAYOUT_PK.to_owned()).await? {
            Some(item) => Ok(Some(from_item::<LayoutItem>(item)?.epochs)),
            None => Ok(None),
        }
    }

    #[tracing::instrument(skip_all, fields(table = %self.table, hours = hours.len(), legacy))]
    async fn hot_listing(&self, hours: &[String], legacy: bool) -> Result<HotListing, StoreError> {
        let mut keys: Vec<String> = hours
            .iter()
            .map(|h| format!("{HOT_HOUR_PREFIX}{h}"))
            .collect();
        if legacy {
            keys.push(LEGACY_HOT_PK.to_owned());
        }
        let mut listing = HotListing {
            hours: BTreeMap::new(),
            legacy: legacy.then(BTreeSet::new),
        };
        for item in self.batch_get(keys).await? {
            let item = from_item::<HotItem>(item)?;
            if item.pk == LEGACY_HOT_PK {
                listing.legacy = Some(item.entities);
            } else if let Some(hour) = item.pk.strip_prefix(HOT_HOUR_PREFIX) {
                listing.hours.insert(hour.to_owned(), item.entities);
            }
        }
        Ok(listing)
    }
}

impl ShardStore for DynamoShards {
    #[tracing::instrument(skip(self, meta), fields(table = %self.table))]
    async fn create_entity(&self, entity: &str, meta: &ShardMeta) -> Result<Written, StoreError> {
        self.put_if_absent(to_item(&EntityItem::from_meta(entity, meta))?)
            .await
    }

    #[tracing::instrument(skip(self, meta), fields(table = %self.table))]
    async fn update_record(
        &self,
        entity: &str,
        condition: &UpdateCondition,
        meta: &ShardMeta,
        hot_through: Option<Timestamp>,
    ) -> Result<Written, StoreError> {
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
        if let Some(through) = hot_through {
            set.push_str(", hot_through = :through");
            request = request.expression_attribute_values(":through", number(through.as_millis()));
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

    #[tracing::instrument(skip(self, hours), fields(table = %self.table, hours = hours.len()))]
    async fn list_hot(
        &self,
        entity: &str,
        hours: &[String],
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let calls: Vec<_> = hours
            .iter()
            .map(|hour| self.list_hour(entity, hour, expires_at))
            .collect();
        futures::stream::iter(calls)
            .buffer_unordered(LIST_CONCURRENCY)
            .try_collect::<()>()
            .await
    }

    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn extend_hot(
        &self,
        entity: &str,
        last_updated: Timestamp,
        through: Timestamp,
    ) -> Result<Written, StoreError> {
        let number = |t: Timestamp| AttributeValue::N(t.as_millis().to_string());
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, AttributeValue::S(entity_pk(entity)))
            .update_expression("SET hot_through = :through")
            .condition_expression(
                "attribute_exists(#pk) AND last_updated = :expected \
                 AND (attribute_not_exists(hot_through) OR hot_through < :through)",
            )
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":expected", number(last_updated))
            .expression_attribute_values(":through", number(through))
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
    async fn create_layout(&self, history: &TableHistory) -> Result<Written, StoreError> {
        self.put_if_absent(to_item(&LayoutItem {
            pk: LAYOUT_PK.to_owned(),
            epochs: history.clone(),
        })?)
        .await
    }

    #[tracing::instrument(skip(self, history), fields(table = %self.table))]
    async fn replace_layout(
        &self,
        expected_epochs: usize,
        history: &TableHistory,
    ) -> Result<Written, StoreError> {
        let item = to_item(&LayoutItem {
            pk: LAYOUT_PK.to_owned(),
            epochs: history.clone(),
        })?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_exists(#pk) AND size(#epochs) = :n")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#epochs", "epochs")
            .expression_attribute_values(":n", AttributeValue::N(expected_epochs.to_string()))
            .send()
            .await;
        conditional(result)
    }
}
