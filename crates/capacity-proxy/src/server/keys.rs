//! Each table's partition key attribute (configured, learned from a `CreateTable` that
//! passed through or from `DescribeTable` upstream, cached, forgotten on `DeleteTable`),
//! and the partition key value of a call on one item.

use bytes::Bytes;
use http::Response;
use serde_json::{Map, Value, json};

use super::request::{Call, table_of};
use super::{Body, Inner, lock};
use crate::config::Mode;
use crate::item::key_string;

impl Inner {
    /// Partition key attribute of `table`: configured, cached, learned from DescribeTable
    /// upstream (with the caller's own auth headers), or the default.
    pub(super) async fn pk_attr(&self, call: &Call, table: &str) -> String {
        if let Some(a) = self.config.configured_pk_attr(table) {
            return a.to_owned();
        }
        if let Some(a) = lock(&self.pk_cache).get(table) {
            return a.clone();
        }
        if let Mode::Forward { .. } = self.config.mode {
            let body = Bytes::from(json!({ "TableName": table }).to_string());
            match self.send(call, Some(body), Some("DescribeTable")).await {
                Ok(reply) if reply.status.is_success() => {
                    if let Some(attr) = reply.json().and_then(|v| {
                        v.get("Table")
                            .and_then(|t| hash_key_of(t.get("KeySchema")?))
                    }) {
                        lock(&self.pk_cache).insert(table.to_owned(), attr.clone());
                        return attr;
                    }
                }
                Ok(reply) => {
                    tracing::debug!(table, status = %reply.status, "DescribeTable failed; default key attribute")
                }
                Err(e) => {
                    tracing::debug!(table, "DescribeTable failed: {e}; default key attribute")
                }
            }
        }
        self.config.pk_attr.clone()
    }

    /// The table, key and partition key value of a call on one item by its `Key`
    /// (`GetItem`, `UpdateItem`), which the sink does not serve; `Err` is the answer to
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

    /// Forwards a `CreateTable`; once created, the table's key attribute is known.
    pub(super) async fn create_table(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(call.op());
        }
        let reply = match self.forward(call, None).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        if reply.status.is_success()
            && let (Some(t), Some(attr)) =
                (table_of(json), json.get("KeySchema").and_then(hash_key_of))
        {
            lock(&self.pk_cache).insert(t, attr);
        }
        reply.into_response()
    }

    /// Forgets the table's learned key attribute and forwards the `DeleteTable`.
    pub(super) async fn delete_table(&self, call: &Call, json: &Value) -> Response<Body> {
        if let Some(t) = table_of(json) {
            lock(&self.pk_cache).remove(&t);
        }
        self.passthrough(call).await
    }
}

/// The HASH attribute of a `KeySchema` list.
fn hash_key_of(schema: &Value) -> Option<String> {
    schema.as_array()?.iter().find_map(|k| {
        (k.get("KeyType")?.as_str()? == "HASH")
            .then(|| k.get("AttributeName")?.as_str().map(str::to_owned))
            .flatten()
    })
}
