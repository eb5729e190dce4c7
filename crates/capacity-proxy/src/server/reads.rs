//! Reads (`GetItem`, `Query`): refused before forwarding when the key's read capacity
//! is spent, then charged by the size the upstream returned.

use http::Response;
use serde_json::Value;

use super::request::{Call, table_of};
use super::{Body, Inner, UNKNOWN_PK, lock};
use crate::capacity::{ThrottleReason, read_cost};
use crate::config::Mode;
use crate::item::{item_size, query_partition_key};

impl Inner {
    /// Refuses a read before forwarding when the key's bucket is spent.
    fn check_read(
        &self,
        table: &str,
        pk: Option<&str>,
        consistent: bool,
    ) -> Result<(), ThrottleReason> {
        let now = self.config.clock.now();
        let result = lock(&self.capacity).check_read(table, pk, read_cost(0, consistent), now);
        result.inspect_err(|&reason| {
            lock(&self.stats).throttled(table, pk, reason, 1, now);
        })
    }

    /// Charges a completed read of `cost` RCU.
    pub(super) fn charge_read(&self, table: &str, pk: Option<&str>, cost: f64) {
        let now = self.config.clock.now();
        lock(&self.capacity).charge_read(table, pk, cost, now);
        lock(&self.stats).read(table, pk.unwrap_or(UNKNOWN_PK), cost, now);
    }

    /// Checks a read of `pk` in `table`, forwards it, and charges it by the bytes
    /// `returned` finds in a successful answer (none when it finds nothing).
    async fn read_through(
        &self,
        call: &Call,
        table: &str,
        pk: Option<&str>,
        consistent: bool,
        returned: fn(&Value) -> Option<usize>,
    ) -> Response<Body> {
        if let Err(reason) = self.check_read(table, pk, consistent) {
            return self.throttled(&[reason], table);
        }
        let reply = match self.forward(call, None).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        if reply.status.is_success() {
            let bytes = reply.json().and_then(|v| returned(&v)).unwrap_or(0);
            self.charge_read(table, pk, read_cost(bytes, consistent));
        }
        reply.into_response()
    }

    pub(super) async fn get_item(&self, call: &Call, json: &Value) -> Response<Body> {
        let (table, _, pk) = match self.keyed_call(call, json).await {
            Ok(keyed) => keyed,
            Err(answer) => return answer,
        };
        self.read_through(call, &table, pk.as_deref(), consistent(json), |v| {
            v.get("Item").and_then(Value::as_object).map(item_size)
        })
        .await
    }

    pub(super) async fn query(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(call.op());
        }
        let Some(table) = table_of(json) else {
            return self.passthrough(call).await;
        };
        // An index has its own key schema; such reads are charged to the table only.
        let pk = if json.get("IndexName").is_some() {
            None
        } else {
            let pk_attr = self.pk_attr(call, &table).await;
            query_partition_key(json, &pk_attr)
        };
        self.read_through(call, &table, pk.as_deref(), consistent(json), |v| {
            v.get("Items").and_then(Value::as_array).map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_object)
                    .map(item_size)
                    .sum::<usize>()
            })
        })
        .await
    }
}

/// Whether a read asks for strong consistency (`ConsistentRead`).
fn consistent(json: &Value) -> bool {
    json.get("ConsistentRead").and_then(Value::as_bool) == Some(true)
}
