//! Single-item writes: `PutItem` (forwarded, or stored in the sink) and `UpdateItem`,
//! each charged against its key's and table's write capacity first.

use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::request::{Call, table_of};
use super::sink::SinkKey;
use super::{Body, Inner, UNKNOWN_PK, lock};
use crate::capacity::{ThrottleReason, write_cost};
use crate::config::Mode;
use crate::ddb;
use crate::item::{item_size, key_string};

impl Inner {
    /// Charges a single-item write; `Err` is the throttle reason.
    fn charge_single_write(
        &self,
        table: &str,
        pk: Option<&str>,
        bytes: usize,
    ) -> Result<(), ThrottleReason> {
        let now = self.config.clock.now();
        let cost = write_cost(bytes);
        let result = lock(&self.capacity).try_write(table, pk, cost, now);
        let mut stats = lock(&self.stats);
        match result {
            Ok(()) => {
                stats.write(table, pk.unwrap_or(UNKNOWN_PK), cost, now);
                Ok(())
            }
            Err(reason) => {
                stats.throttled(table, pk, reason, 1, now);
                Err(reason)
            }
        }
    }

    pub(super) async fn put_item(&self, call: &Call, json: &Value) -> Response<Body> {
        let (Some(table), Some(item)) =
            (table_of(json), json.get("Item").and_then(Value::as_object))
        else {
            return self
                .malformed(call, "TableName and Item are required")
                .await;
        };
        let pk_attr = self.pk_attr(call, &table).await;
        let pk = item.get(&pk_attr).and_then(key_string);
        if let Err(reason) = self.charge_single_write(&table, pk.as_deref(), item_size(item)) {
            return self.throttled(&[reason], &table);
        }
        if self.config.mode == Mode::Sink {
            let sk = item.get(self.config.sk_attr(&table)).and_then(key_string);
            lock(&self.sink).insert(SinkKey {
                table,
                pk: pk.unwrap_or_else(|| UNKNOWN_PK.to_owned()),
                sk,
            });
            return ddb::json_response(StatusCode::OK, &json!({}));
        }
        self.passthrough(call).await
    }

    pub(super) async fn update_item(&self, call: &Call, json: &Value) -> Response<Body> {
        let (table, key, pk) = match self.keyed_call(call, json).await {
            Ok(keyed) => keyed,
            Err(answer) => return answer,
        };
        // The resulting item is unknown before the write: estimate it as the key plus the
        // values the update expression carries.
        let values = json
            .get("ExpressionAttributeValues")
            .and_then(Value::as_object)
            .map_or(0, item_size);
        if let Err(reason) =
            self.charge_single_write(&table, pk.as_deref(), item_size(key) + values)
        {
            return self.throttled(&[reason], &table);
        }
        self.passthrough(call).await
    }
}
