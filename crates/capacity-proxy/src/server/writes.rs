//! Single-item writes: `PutItem` (forwarded, or stored in the sink), `UpdateItem` and
//! `DeleteItem`, charged as DynamoDB bills them, ceil(bytes / 1 KB) WCU and at least 1,
//! by the larger of the item before and after the write. In forward mode the item under
//! the call's key is looked up first ([`Inner::stored_size`]):
//! - `PutItem`: the larger of the item it replaces (if any) and its own item;
//! - `UpdateItem`: the larger of the item before and after the update (after: the
//!   caller's `ALL_NEW` answer when it asked for one, else a second lookup);
//! - `DeleteItem`: the item deleted (a missing item costs 1).
//!
//! A write whose condition fails (`ConditionalCheckFailedException`) costs the existing
//! item's units, at least 1, as DynamoDB charges it; a write the upstream refuses
//! otherwise costs nothing. The call is forwarded unchanged, so the caller's
//! `ReturnValues` are answered as asked.
//!
//! Admission: the key's and the table's buckets must cover what is known before the call
//! (`PutItem`: its cost if it succeeds; `UpdateItem`, `DeleteItem`: the existing item's
//! units); once the upstream has answered, the charge is settled to the call's cost, the
//! rest taken (possibly into debt, as a read's is) or given back.
//!
//! In sink mode a `PutItem` is charged by its own item alone: the sink keeps no values,
//! so it knows no item before, and it evaluates no condition.

use http::{Response, StatusCode};
use serde_json::{Map, Value, json};

use super::request::{Call, table_of};
use super::sink::SinkKey;
use super::upstream::Reply;
use super::{Body, Inner, UNKNOWN_PK};
use crate::capacity::{ThrottleReason, write_cost};
use crate::config::Mode;
use crate::ddb;
use crate::item::{item_size, key_string};

/// How the upstream answered a single-item write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The write was made.
    Written,
    /// Its condition failed: charged, nothing written.
    ConditionFailed,
    /// Refused for another reason (validation, a missing table): not charged.
    Refused,
}

impl Outcome {
    /// The outcome `reply` reports.
    fn of(reply: &Reply) -> Self {
        if reply.status.is_success() {
            return Self::Written;
        }
        let body = reply.json();
        if body.as_ref().and_then(ddb::error_name) == Some("ConditionalCheckFailedException") {
            Self::ConditionFailed
        } else {
            Self::Refused
        }
    }
}

impl Inner {
    /// Admits a write of `reserved` WCU to (`table`, `pk`), or says why not (counted as
    /// a throttled item).
    pub(super) fn reserve_write(
        &self,
        table: &str,
        pk: Option<&str>,
        reserved: f64,
    ) -> Result<(), ThrottleReason> {
        let now = self.config.clock.now();
        let result = self.capacity.lock().try_write(table, pk, reserved, now);
        result.inspect_err(|&reason| {
            self.stats.lock().throttled(table, pk, reason, 1, now);
        })
    }

    /// Settles a write admitted at `reserved` WCU that cost `actual`: the buckets are
    /// charged the difference and the counters the cost, with an item when `written`.
    pub(super) fn settle_write(
        &self,
        table: &str,
        pk: Option<&str>,
        reserved: f64,
        actual: f64,
        written: bool,
    ) {
        let now = self.config.clock.now();
        self.capacity
            .lock()
            .settle_write(table, pk, reserved, actual, now);
        let mut stats = self.stats.lock();
        let pk = pk.unwrap_or(UNKNOWN_PK);
        if written {
            stats.write(table, pk, actual, now);
        } else if actual > 0.0 {
            stats.write_units(table, pk, actual, now);
        }
    }

    /// Admits a single-item write of `reserved` WCU and forwards it unchanged; `Err` is
    /// the answer when it is throttled or the upstream cannot be reached (then nothing
    /// is charged).
    async fn admit_and_forward(
        &self,
        call: &Call,
        table: &str,
        pk: Option<&str>,
        reserved: f64,
    ) -> Result<(Reply, Outcome), Response<Body>> {
        if let Err(reason) = self.reserve_write(table, pk, reserved) {
            return Err(self.throttled(&[reason], table));
        }
        match self.forward(call, None).await {
            Ok(reply) => {
                let outcome = Outcome::of(&reply);
                Ok((reply, outcome))
            }
            Err(answer) => {
                self.settle_write(table, pk, reserved, 0.0, false);
                Err(answer)
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
        let new = item_size(item);
        if self.config.mode == Mode::Sink {
            let cost = write_cost(new);
            if let Err(reason) = self.reserve_write(&table, pk.as_deref(), cost) {
                return self.throttled(&[reason], &table);
            }
            self.settle_write(&table, pk.as_deref(), cost, cost, true);
            let sk = item.get(self.config.sk_attr(&table)).and_then(key_string);
            self.sink.lock().insert(SinkKey {
                table,
                pk: pk.unwrap_or_else(|| UNKNOWN_PK.to_owned()),
                sk,
            });
            return ddb::json_response(StatusCode::OK, &json!({}));
        }
        let before = match self.item_key(call, &table, item).await {
            Some(key) => self.stored_size(call, &table, &key).await,
            None => 0,
        };
        let reserved = write_cost(before.max(new));
        let (reply, outcome) = match self
            .admit_and_forward(call, &table, pk.as_deref(), reserved)
            .await
        {
            Ok(answered) => answered,
            Err(answer) => return answer,
        };
        let actual = match outcome {
            Outcome::Written => reserved,
            Outcome::ConditionFailed => write_cost(before),
            Outcome::Refused => 0.0,
        };
        self.settle_write(
            &table,
            pk.as_deref(),
            reserved,
            actual,
            outcome == Outcome::Written,
        );
        reply.into_response()
    }

    pub(super) async fn update_item(&self, call: &Call, json: &Value) -> Response<Body> {
        let (table, key, pk) = match self.keyed_call(call, json).await {
            Ok(keyed) => keyed,
            Err(answer) => return answer,
        };
        let before = self.stored_size(call, &table, key).await;
        // What the update leaves is known only once it is made.
        let reserved = write_cost(before);
        let (reply, outcome) = match self
            .admit_and_forward(call, &table, pk.as_deref(), reserved)
            .await
        {
            Ok(answered) => answered,
            Err(answer) => return answer,
        };
        let actual = match outcome {
            Outcome::Written => {
                let after = match all_new(json, &reply) {
                    Some(after) => after,
                    None => self.stored_size(call, &table, key).await,
                };
                write_cost(before.max(after))
            }
            Outcome::ConditionFailed => write_cost(before),
            Outcome::Refused => 0.0,
        };
        self.settle_write(
            &table,
            pk.as_deref(),
            reserved,
            actual,
            outcome == Outcome::Written,
        );
        reply.into_response()
    }

    pub(super) async fn delete_item(&self, call: &Call, json: &Value) -> Response<Body> {
        let (table, key, pk) = match self.keyed_call(call, json).await {
            Ok(keyed) => keyed,
            Err(answer) => return answer,
        };
        // Deleted or not (a failed condition), the item is what is charged.
        let reserved = write_cost(self.stored_size(call, &table, key).await);
        let (reply, outcome) = match self
            .admit_and_forward(call, &table, pk.as_deref(), reserved)
            .await
        {
            Ok(answered) => answered,
            Err(answer) => return answer,
        };
        let actual = match outcome {
            Outcome::Written | Outcome::ConditionFailed => reserved,
            Outcome::Refused => 0.0,
        };
        self.settle_write(
            &table,
            pk.as_deref(),
            reserved,
            actual,
            outcome == Outcome::Written,
        );
        reply.into_response()
    }
}

/// The size of the item an `UpdateItem` left, when the caller asked for it whole
/// (`ReturnValues: ALL_NEW`) and the upstream answered with it.
fn all_new(request: &Value, reply: &Reply) -> Option<usize> {
    if request.get("ReturnValues").and_then(Value::as_str) != Some("ALL_NEW") {
        return None;
    }
    let answer = reply.json()?;
    answer
        .get("Attributes")
        .and_then(Value::as_object)
        .map(|item: &Map<String, Value>| item_size(item))
}
