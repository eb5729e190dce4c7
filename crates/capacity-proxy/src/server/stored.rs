//! The item as the upstream holds it, looked up with a strongly consistent `GetItem`
//! sent with the caller's own headers. A write's charge depends on it (the item it
//! replaces, updates or deletes, and the item an update leaves), and so does a read's
//! when its answer shows less than it read (a projection). The lookups are the
//! emulator's own: they are not charged and not counted as requests. Another writer
//! may change the item between a lookup and the call it sizes; the emulator accepts
//! that race.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::Inner;
use super::request::Call;
use crate::item::item_size;

impl Inner {
    /// The size in bytes of the item under `key` in `table`: 0 when there is none, or
    /// when the lookup fails (then the call it sizes fails too, as a rule).
    pub(super) async fn stored_size(
        &self,
        call: &Call,
        table: &str,
        key: &Map<String, Value>,
    ) -> usize {
        let body = json!({ "TableName": table, "Key": key, "ConsistentRead": true });
        match self
            .send(call, Some(Bytes::from(body.to_string())), Some("GetItem"))
            .await
        {
            Ok(reply) if reply.status.is_success() => reply
                .json()
                .and_then(|v| v.get("Item").and_then(Value::as_object).map(item_size))
                .unwrap_or(0),
            Ok(reply) => {
                tracing::debug!(table, status = %reply.status, "item lookup failed; sized as none");
                0
            }
            Err(e) => {
                tracing::debug!(table, "item lookup failed: {e}; sized as none");
                0
            }
        }
    }
}
