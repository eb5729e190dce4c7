//! [`RollupTable`] on DynamoDB: each item `PK`, `SK`, `version` (N), `body` (S, omitted
//! when empty) and `ttl` (N, when it expires).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use super::{RollupItem, RollupPage, RollupQuery, RollupTable};
use crate::dynamo::{classify, conditional};
use crate::error::StoreError;
use crate::item::{PK, SK};

const VERSION: &str = "version";
const BODY: &str = "body";
const TTL: &str = "ttl";

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

fn to_attributes(item: &RollupItem) -> HashMap<String, AttributeValue> {
    let mut map = HashMap::from([
        (PK.to_owned(), s(&item.pk)),
        (SK.to_owned(), s(&item.sk)),
        (VERSION.to_owned(), n(item.version)),
    ]);
    if !item.body.is_empty() {
        map.insert(BODY.to_owned(), s(&item.body));
    }
    if let Some(ttl) = item.ttl {
        map.insert(TTL.to_owned(), n(ttl));
    }
    map
}

fn from_attributes(mut map: HashMap<String, AttributeValue>) -> Result<RollupItem, StoreError> {
    let mut text = |name: &str| match map.remove(name) {
        Some(AttributeValue::S(v)) => Ok(Some(v)),
        Some(AttributeValue::N(v)) => Ok(Some(v)),
        None => Ok(None),
        Some(other) => Err(StoreError::Malformed(format!(
            "derived item attribute {name}: {other:?}"
        ))),
    };
    let required = |v: Option<String>, name: &str| {
        v.ok_or_else(|| StoreError::Malformed(format!("derived item without {name}")))
    };
    let pk = required(text(PK)?, PK)?;
    let sk = required(text(SK)?, SK)?;
    let number = |v: String, name: &str| {
        v.parse::<i128>()
            .map_err(|e| StoreError::Malformed(format!("derived item {name} {v:?}: {e}")))
    };
    let version = number(required(text(VERSION)?, VERSION)?, VERSION)?;
    let version = u64::try_from(version)
        .map_err(|e| StoreError::Malformed(format!("derived item version: {e}")))?;
    let body = text(BODY)?.unwrap_or_default();
    let ttl = match text(TTL)? {
        Some(v) => Some(number(v, TTL)? as i64),
        None => None,
    };
    Ok(RollupItem {
        pk,
        sk,
        version,
        body,
        ttl,
    })
}

impl RollupTable for DynamoRollups {
    #[tracing::instrument(skip_all, fields(table = %self.table, item = %item))]
    async fn put_if_newer(&self, item: &RollupItem) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_attributes(item)))
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
    ) -> Result<bool, StoreError> {
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_attributes(item)));
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
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<bool, StoreError> {
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
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_attributes(item)))
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
        out.item.map(from_attributes).transpose()
    }

    #[tracing::instrument(skip_all, fields(table = %self.table, pk = %q.pk))]
    async fn query(&self, q: &RollupQuery) -> Result<RollupPage, StoreError> {
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
        let items = out
            .items
            .unwrap_or_default()
            .into_iter()
            .map(from_attributes)
            .collect::<Result<_, _>>()?;
        Ok(RollupPage {
            items,
            last_sk,
            evaluated,
        })
    }
}
