//! Reads (`GetItem`, `Query`): refused before forwarding when the key's read capacity
//! is spent, then charged as DynamoDB bills them, ceil(bytes / 4 KB) RCU, halved when
//! eventually consistent: a `GetItem` by its item, a `Query` by the sum of the items its
//! page read, once per call.
//!
//! A read is charged by what it read, not by what its answer shows: a projection,
//! `Select: COUNT` or a filter that dropped items leaves the answer smaller than the
//! read. Then the proxy sizes the read itself with an uncharged call of its own: the
//! whole item for a projected `GetItem`; for such a `Query`, the same key condition from
//! the same start with no filter, projection or count, limited to the page's
//! `ScannedCount`.

use http::Response;
use serde_json::{Map, Value};

use super::request::{Call, table_of};
use super::upstream::Reply;
use super::{Body, Inner, UNKNOWN_PK};
use crate::capacity::{ThrottleReason, read_cost};
use crate::config::Mode;
use crate::item::{item_size, query_partition_key};

/// What a `Query` copies into the call that sizes its page: what selects the items it
/// reads, and in what order.
const QUERY_READ_FIELDS: [&str; 7] = [
    "TableName",
    "IndexName",
    "KeyConditionExpression",
    "KeyConditions",
    "ExclusiveStartKey",
    "ScanIndexForward",
    "ConsistentRead",
];

impl Inner {
    /// Refuses a read before forwarding when the key's bucket is spent.
    fn check_read(
        &self,
        table: &str,
        pk: Option<&str>,
        consistent: bool,
    ) -> Result<(), ThrottleReason> {
        let now = self.config.clock.now();
        let result = self
            .capacity
            .lock()
            .check_read(table, pk, read_cost(0, consistent), now);
        result.inspect_err(|&reason| {
            self.stats.lock().throttled(table, pk, reason, 1, now);
        })
    }

    /// Charges a completed read of `cost` RCU.
    pub(super) fn charge_read(&self, table: &str, pk: Option<&str>, cost: f64) {
        let now = self.config.clock.now();
        self.capacity.lock().charge_read(table, pk, cost, now);
        self.stats
            .lock()
            .read(table, pk.unwrap_or(UNKNOWN_PK), cost, now);
    }

    /// Checks a read of `pk` in `table` and forwards it; `Err` is the answer when it is
    /// throttled or the upstream cannot be reached.
    async fn admit_read(
        &self,
        call: &Call,
        table: &str,
        pk: Option<&str>,
        consistent: bool,
    ) -> Result<Reply, Response<Body>> {
        if let Err(reason) = self.check_read(table, pk, consistent) {
            return Err(self.throttled(&[reason], table));
        }
        self.forward(call, None).await
    }

    pub(super) async fn get_item(&self, call: &Call, json: &Value) -> Response<Body> {
        let (table, key, pk) = match self.keyed_call(call, json).await {
            Ok(keyed) => keyed,
            Err(answer) => return answer,
        };
        let consistent = consistent(json);
        let reply = match self
            .admit_read(call, &table, pk.as_deref(), consistent)
            .await
        {
            Ok(reply) => reply,
            Err(answer) => return answer,
        };
        if reply.status.is_success() {
            let bytes = if projects(json) {
                self.stored_size(call, &table, key).await
            } else {
                reply
                    .json()
                    .and_then(|v| v.get("Item").and_then(Value::as_object).map(item_size))
                    .unwrap_or(0)
            };
            self.charge_read(&table, pk.as_deref(), read_cost(bytes, consistent));
        }
        reply.into_response()
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
        let consistent = consistent(json);
        let reply = match self
            .admit_read(call, &table, pk.as_deref(), consistent)
            .await
        {
            Ok(reply) => reply,
            Err(answer) => return answer,
        };
        if reply.status.is_success() {
            let answer = reply.json();
            let bytes = match answer.as_ref() {
                Some(answer) if shows_less_than_it_read(json, answer) => {
                    self.query_read_size(call, json, answer).await
                }
                Some(answer) => items_size(answer),
                None => 0,
            };
            self.charge_read(&table, pk.as_deref(), read_cost(bytes, consistent));
        }
        reply.into_response()
    }

    /// The bytes a `Query` page read whose `answer` shows less: the same items queried
    /// again, whole and unfiltered, with the caller's headers (not charged).
    async fn query_read_size(&self, call: &Call, request: &Value, answer: &Value) -> usize {
        let scanned = answer.get("ScannedCount").and_then(Value::as_u64);
        let Some(scanned) = scanned.filter(|&n| n > 0) else {
            return 0;
        };
        let body = sizing_query(request, scanned);
        match self
            .send(call, Some(body.to_string().into()), Some("Query"))
            .await
        {
            Ok(reply) if reply.status.is_success() => reply.json().map_or(0, |v| items_size(&v)),
            Ok(reply) => {
                tracing::debug!(status = %reply.status, "sizing query failed; sized by the answer");
                items_size(answer)
            }
            Err(e) => {
                tracing::debug!("sizing query failed: {e}; sized by the answer");
                items_size(answer)
            }
        }
    }
}

/// Whether a read asks for strong consistency (`ConsistentRead`).
fn consistent(json: &Value) -> bool {
    json.get("ConsistentRead").and_then(Value::as_bool) == Some(true)
}

/// Whether a read returns some attributes of its items only.
fn projects(json: &Value) -> bool {
    json.get("ProjectionExpression").is_some() || json.get("AttributesToGet").is_some()
}

/// Whether a `Query`'s `answer` to `request` shows less than the items it read: some
/// attributes of them, a count, or fewer items than it read (a filter dropped some).
/// Only then is the read sized by a call of the proxy's own, which would otherwise add
/// its time to every filtered Query.
fn shows_less_than_it_read(request: &Value, answer: &Value) -> bool {
    let count = |field: &str| answer.get(field).and_then(Value::as_u64);
    projects(request)
        || request
            .get("Select")
            .and_then(Value::as_str)
            .is_some_and(|s| s == "COUNT" || s == "SPECIFIC_ATTRIBUTES")
        || count("ScannedCount") > count("Count")
}

/// The sum of the sizes of an answer's `Items`.
fn items_size(answer: &Value) -> usize {
    answer
        .get("Items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .map(item_size)
        .sum()
}

/// The `Query` that reads the `scanned` items `request` read and returns them whole:
/// its key condition, index, start and order, with the expression names and values the
/// key condition uses (the upstream refuses unused ones).
fn sizing_query(request: &Value, scanned: u64) -> Value {
    let mut query = Map::new();
    for field in QUERY_READ_FIELDS {
        if let Some(v) = request.get(field) {
            query.insert(field.to_owned(), v.clone());
        }
    }
    if let Some(expr) = request
        .get("KeyConditionExpression")
        .and_then(Value::as_str)
    {
        let used = placeholders(expr);
        for field in ["ExpressionAttributeNames", "ExpressionAttributeValues"] {
            let Some(all) = request.get(field).and_then(Value::as_object) else {
                continue;
            };
            let kept: Map<String, Value> = all
                .iter()
                .filter(|(k, _)| used.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !kept.is_empty() {
                query.insert(field.to_owned(), Value::Object(kept));
            }
        }
    }
    query.insert("Limit".to_owned(), scanned.into());
    Value::Object(query)
}

/// The `#name` and `:value` placeholders of an expression.
fn placeholders(expr: &str) -> Vec<&str> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (i, c) in expr.char_indices() {
        if c == '#' || c == ':' {
            let rest = &expr[i + 1..];
            let len = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
            if len > 0 {
                found.push(&expr[i..=i + len]);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_sizing_query_reads_the_same_items_whole_and_unfiltered() {
        let request = json!({
            "TableName": "t",
            "KeyConditionExpression": "#p = :pk AND #s > :s1",
            "FilterExpression": "#ts BETWEEN :lo AND :hi",
            "ProjectionExpression": "#p",
            "Select": "SPECIFIC_ATTRIBUTES",
            "ExpressionAttributeNames": {"#p": "PK", "#pp": "unused", "#s": "SK", "#ts": "ts"},
            "ExpressionAttributeValues": {":pk": {"S": "k"}, ":s1": {"S": "a"}, ":lo": {"N": "1"}, ":hi": {"N": "2"}},
            "ExclusiveStartKey": {"PK": {"S": "k"}, "SK": {"S": "b"}},
            "ScanIndexForward": false,
            "ConsistentRead": true,
            "Limit": 100
        });
        let all_kept = json!({"Count": 7, "ScannedCount": 7});
        assert!(shows_less_than_it_read(&request, &all_kept));
        assert_eq!(
            sizing_query(&request, 7),
            json!({
                "TableName": "t",
                "KeyConditionExpression": "#p = :pk AND #s > :s1",
                "ExpressionAttributeNames": {"#p": "PK", "#s": "SK"},
                "ExpressionAttributeValues": {":pk": {"S": "k"}, ":s1": {"S": "a"}},
                "ExclusiveStartKey": {"PK": {"S": "k"}, "SK": {"S": "b"}},
                "ScanIndexForward": false,
                "ConsistentRead": true,
                "Limit": 7
            })
        );
        let filtered = json!({"TableName": "t", "FilterExpression": "#a = :a"});
        assert!(!shows_less_than_it_read(&filtered, &all_kept));
        let some_dropped = json!({"Count": 6, "ScannedCount": 7});
        assert!(shows_less_than_it_read(&filtered, &some_dropped));
        assert!(!shows_less_than_it_read(
            &json!({"TableName": "t", "Select": "ALL_ATTRIBUTES"}),
            &all_kept
        ));
    }
}
