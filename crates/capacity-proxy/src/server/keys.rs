//! Each table's key schema (its partition key attribute configured; the schema learned
//! from a `CreateTable` that passed through or from `DescribeTable` upstream, cached,
//! forgotten on `DeleteTable`), the partition key value of a call on one item, and an
//! item's primary key.

use bytes::Bytes;
use http::Response;
use serde_json::{Map, Value, json};

use super::request::{Call, table_of};
use super::{Body, Inner};
use crate::config::Mode;
use crate::item::key_string;

/// A table's primary key attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeySchema {
    hash: String,
    range: Option<String>,
}

impl KeySchema {
    /// The schema of a `KeySchema` list (`None` without a HASH attribute).
    fn of(schema: &Value) -> Option<Self> {
        let attr = |kind: &str| {
            schema.as_array()?.iter().find_map(|k| {
                (k.get("KeyType")?.as_str()? == kind)
                    .then(|| k.get("AttributeName")?.as_str().map(str::to_owned))
                    .flatten()
            })
        };
        Some(Self {
            hash: attr("HASH")?,
            range: attr("RANGE"),
        })
    }

    /// The primary key of `item`; `None` when it lacks a key attribute.
    pub(super) fn key_of(&self, item: &Map<String, Value>) -> Option<Map<String, Value>> {
        let mut key = Map::new();
        for attr in std::iter::once(&self.hash).chain(&self.range) {
            key.insert(attr.clone(), item.get(attr)?.clone());
        }
        Some(key)
    }
}

impl Inner {
    /// Partition key attribute of `table`: configured, else from its key schema
    /// ([`Inner::key_schema`]), else the default.
    pub(super) async fn pk_attr(&self, call: &Call, table: &str) -> String {
        if let Some(a) = self.config.configured_pk_attr(table) {
            return a.to_owned();
        }
        match self.key_schema(call, table).await {
            Some(schema) => schema.hash,
            None => self.config.pk_attr.clone(),
        }
    }

    /// The key schema of `table`: cached, or learned from DescribeTable upstream (with
    /// the caller's own auth headers) and cached; `None` when it cannot be learned.
    pub(super) async fn key_schema(&self, call: &Call, table: &str) -> Option<KeySchema> {
        if let Some(schema) = self.key_schemas.lock().get(table) {
            return Some(schema.clone());
        }
        if self.config.mode == Mode::Sink {
            return None;
        }
        let body = Bytes::from(json!({ "TableName": table }).to_string());
        match self.send(call, Some(body), Some("DescribeTable")).await {
            Ok(reply) if reply.status.is_success() => {
                let schema = reply
                    .json()
                    .and_then(|v| KeySchema::of(v.get("Table")?.get("KeySchema")?));
                if let Some(schema) = &schema {
                    self.key_schemas
                        .lock()
                        .insert(table.to_owned(), schema.clone());
                }
                schema
            }
            Ok(reply) => {
                tracing::debug!(table, status = %reply.status, "DescribeTable failed; key schema unknown");
                None
            }
            Err(e) => {
                tracing::debug!(table, "DescribeTable failed: {e}; key schema unknown");
                None
            }
        }
    }

    /// The primary key of `item` in `table`; `None` when the table's key schema is
    /// unknown or the item lacks a key attribute.
    pub(super) async fn item_key(
        &self,
        call: &Call,
        table: &str,
        item: &Map<String, Value>,
    ) -> Option<Map<String, Value>> {
        self.key_schema(call, table).await?.key_of(item)
    }

    /// The table, key and partition key value of a call on one item by its `Key`
    /// (`GetItem`, `UpdateItem`, `DeleteItem`), which the sink does not serve; `Err` is the answer to
    /// a call without them (passed through) or in sink mode.
    pub(super) async fn keyed_call<'j>(
        &self,
        call: &Call,
        json: &'j Value,
    ) -> Result<(String, &'j Map<String, Value>, Option<String>), Response<Body>> {
        if self.config.mode == Mode::Sink {
            return Err(self.sink_unsupported(call.op()));
        }
        let (Some(table), Some(key)) = (table_of(json), json.get("Key").and_then(Value::as_object))
        else {
            return Err(self.passthrough(call).await);
        };
        let pk_attr = self.pk_attr(call, &table).await;
        let pk = key.get(&pk_attr).and_then(key_string);
        Ok((table, key, pk))
    }

    /// Forwards a `CreateTable`; once created, the table's key schema is known.
    pub(super) async fn create_table(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(call.op());
        }
        let reply = match self.forward(call, None).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        if reply.status.is_success()
            && let (Some(t), Some(schema)) = (
                table_of(json),
                json.get("KeySchema").and_then(KeySchema::of),
            )
        {
            self.key_schemas.lock().insert(t, schema);
        }
        reply.into_response()
    }

    /// Forgets the table's learned key schema and forwards the `DeleteTable`.
    pub(super) async fn delete_table(&self, call: &Call, json: &Value) -> Response<Body> {
        if let Some(t) = table_of(json) {
            self.key_schemas.lock().remove(&t);
        }
        self.passthrough(call).await
    }
}
