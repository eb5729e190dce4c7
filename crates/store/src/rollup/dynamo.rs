//! [`RollupTable`] on DynamoDB: each item `PK`, `SK`, `version` (N), `body` (S, omitted
//! when empty) and `ttl` (N, when it expires); a body over
//! [`CHUNK_BYTES`](super::stored::CHUNK_BYTES) in chunks written before its head
//! (`store::rollup::stored`).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use super::stored::{Row, VERSION, chunk_pk, from_attributes, join, rows, to_attributes};
use super::{RollupItem, RollupPage, RollupQuery, RollupTable};
use crate::dynamo::{classify, conditional};
use crate::error::StoreError;
use crate::item::{PK, SK};
use crate::written::Written;

/// The rollups table (`ROLLUP_TABLE`).
#[derive(Debug, Clone)]
pub struct DynamoRollups {
    client: Client,
    table: String,
}

impl DynamoRollups {
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

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

impl DynamoRollups {
    /// Writes the chunks of a body that does not fit in its head, before the head.
    async fn put_chunks(&self, chunks: &[Row]) -> Result<(), StoreError> {
        for chunk in chunks {
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(to_attributes(chunk)))
                .send()
                .await
                .map_err(|e| classify(&e))?;
        }
        Ok(())
    }

    /// The item of a head read, its chunks read after it.
    async fn joined(&self, head: Row, consistent: bool) -> Result<RollupItem, StoreError> {
        let Some((digest, _)) = &head.chunked else {
            return join(head, &[]);
        };
        let mut q = RollupQuery::partition(chunk_pk(&head.pk, &head.sk, digest), consistent);
        let mut chunks = Vec::new();
        loop {
            let (rows, last) = self.query_rows(&q).await?;
            chunks.extend(rows);
            match last {
                Some(last) => q.after = Some(last),
                None => break,
            }
        }
        join(head, &chunks)
    }

    /// One page of one Query, as stored rows, and the last sort key evaluated.
    async fn query_rows(&self, q: &RollupQuery) -> Result<(Vec<Row>, Option<String>), StoreError> {
        let (rows, last, _) = self.query_page(q).await?;
        Ok((rows, last))
    }

    async fn query_page(
        &self,
        q: &RollupQuery,
    ) -> Result<(Vec<Row>, Option<String>, u64), StoreError> {
        let mut condition = "#pk = :pk".to_owned();
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":pk", s(&q.pk))
            .scan_index_forward(q.ascending)
            .consistent_read(q.consistent)
            .set_limit(q.limit.map(|l| l as i32));
        if let Some((lo, hi)) = &q.sk_between {
            condition.push_str(" AND #sk BETWEEN :lo AND :hi");
            request = request
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":lo", s(lo))
                .expression_attribute_values(":hi", s(hi));
        } else if let Some(prefix) = &q.sk_prefix {
            condition.push_str(" AND begins_with(#sk, :prefix)");
            request = request
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":prefix", s(prefix));
        }
        if let Some(after) = &q.after {
            request = request
                .exclusive_start_key(PK, s(&q.pk))
                .exclusive_start_key(SK, s(after));
        }
        let out = request
            .key_condition_expression(condition)
            .send()
            .await
            .map_err(|e| classify(&e))?;
        let evaluated = out.scanned_count.max(0) as u64;
        let last_sk = match out.last_evaluated_key {
            Some(mut key) => match key.remove(SK) {
                Some(AttributeValue::S(sk)) => Some(sk),
                _ => None,
            },
            None => None,
        };
        let rows = out
            .items
            .unwrap_or_default()
            .into_iter()
            .map(from_attributes)
            .collect::<Result<_, _>>()?;
        Ok((rows, last_sk, evaluated))
    }
}

impl RollupTable for DynamoRollups {
    #[tracing::instrument(skip_all, fields(table = %self.table, item = %item))]
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        let (head, chunks) = rows(item);
        self.put_chunks(&chunks).await?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_attributes(&head)))
            .condition_expression("attribute_not_exists(#pk) OR #v < :v")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#v", VERSION)
            .expression_attribute_values(":v", n(item.version))
            .send()
            .await;
        conditional(result)
    }

    #[tracing::instrument(skip_all, fields(table = %self.table, item = %item))]
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        let (head, chunks) = rows(item);
        self.put_chunks(&chunks).await?;
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_attributes(&head)));
        let request = match expected {
            None => request
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", PK),
            Some(v) => request
                .condition_expression("#v = :expected")
                .expression_attribute_names("#v", VERSION)
                .expression_attribute_values(":expected", n(v)),
        };
        conditional(request.send().await)
    }

    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(sk))
            .condition_expression("#v = :v")
            .expression_attribute_names("#v", VERSION)
            .expression_attribute_values(":v", n(version))
            .send()
            .await;
        conditional(result)
    }

    #[tracing::instrument(skip_all, fields(table = %self.table, item = %item))]
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        let (head, chunks) = rows(item);
        self.put_chunks(&chunks).await?;
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_attributes(&head)))
            .send()
            .await
            .map_err(|e| classify(&e))?;
        Ok(())
    }

    #[tracing::instrument(skip(self), fields(table = %self.table))]
    async fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<RollupItem>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(pk))
            .key(SK, s(sk))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| classify(&e))?;
        match out.item {
            Some(map) => Ok(Some(self.joined(from_attributes(map)?, consistent).await?)),
            None => Ok(None),
        }
    }

    #[tracing::instrument(skip_all, fields(table = %self.table, pk = %q.pk))]
    async fn query(&self, q: &RollupQuery) -> Result<RollupPage, StoreError> {
        let (rows, last_sk, evaluated) = self.query_page(q).await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in rows {
            items.push(self.joined(row, q.consistent).await?);
        }
        Ok(RollupPage {
            items,
            last_sk,
            evaluated,
        })
    }
}
