//! Transactions, charged as DynamoDB bills them: each action twice the units it would
//! cost alone, charged to its own key and table.
//!
//! `TransactWriteItems`: the item of each action is looked up first
//! ([`Inner::stored_size`]). A `Put` costs twice the write units of the larger of the item
//! it replaces and its own, an `Update` twice those of the larger of the item before and
//! after (after: a second lookup once the transaction is made), a `Delete` twice those of
//! the item deleted, a `ConditionCheck` twice those of the item it checks (DynamoDB bills
//! it as a write). The actions are admitted together, all or none: when one is over its
//! key's or table's budget the transaction is cancelled before it is sent, as DynamoDB
//! does, with `TransactionCanceledException` and a `ThrottlingError` reason for each such
//! action, and costs nothing. A transaction the upstream cancels for a failed condition
//! is charged each action once at the units of the item it found, at least 1, as a failed
//! conditional write is (DynamoDB's documentation does not say what a cancelled
//! transaction costs; this is the emulator's assumption); cancelled otherwise, or refused,
//! it costs nothing. A retry with the same `ClientRequestToken` is charged as a new
//! transaction (DynamoDB charges an idempotent replay as reads).
//!
//! `TransactGetItems`: each `Get` is refused before forwarding, cancelling the
//! transaction, when its key cannot cover a transactional read of the smallest item (2
//! RCU), then charged twice the strongly consistent read units of its item (its whole
//! item, looked up when the `Get` projects attributes).

use http::Response;
use serde_json::{Map, Value};

use super::request::Call;
use super::upstream::Reply;
use super::{Body, Inner};
use crate::capacity::{ThrottleReason, read_cost, write_cost};
use crate::config::Mode;
use crate::ddb;
use crate::item::{item_size, key_string};

/// The smallest transactional read: twice a strongly consistent read of nothing.
const MIN_TRANSACTIONAL_READ: f64 = 2.0;

/// What a `TransactWriteItems` action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Put,
    Update,
    Delete,
    ConditionCheck,
}

/// One action of a transaction, with what its charge depends on.
struct Action {
    kind: Kind,
    table: String,
    /// Its item's primary key; `None` for a `Put` whose table's key schema is unknown.
    key: Option<Map<String, Value>>,
    pk: Option<String>,
    /// A `Put`'s own item size (0 for the other kinds).
    new: usize,
    /// The size of its item before the transaction (0 when there is none).
    before: usize,
}

/// One `Get` of a `TransactGetItems`.
struct Get {
    table: String,
    key: Map<String, Value>,
    pk: Option<String>,
    /// Whether it asks for some attributes only: its answer then shows less than it read.
    projected: bool,
}

impl Action {
    /// Write units of the action alone, once the transaction is made; `after` is the
    /// size of an `Update`'s item after it.
    fn units(&self, after: usize) -> f64 {
        match self.kind {
            Kind::Put => write_cost(self.before.max(self.new)),
            Kind::Update => write_cost(self.before.max(after)),
            Kind::Delete | Kind::ConditionCheck => write_cost(self.before),
        }
    }
}

impl Inner {
    pub(super) async fn transact_write(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(call.op());
        }
        let Some(mut actions) = self.write_actions(call, json).await else {
            // The upstream answers what it cannot read; nothing is charged.
            return self.passthrough(call).await;
        };
        for action in &mut actions {
            if let Some(key) = &action.key {
                action.before = self.stored_size(call, &action.table, key).await;
            }
        }
        // Reserved at what each action costs if the transaction is made; an update's
        // item after it is known only then.
        let reserved: Vec<f64> = actions.iter().map(|a| 2.0 * a.units(0)).collect();
        let writes: Vec<_> = actions
            .iter()
            .zip(&reserved)
            .map(|(a, &cost)| (a.table.as_str(), a.pk.as_deref(), cost))
            .collect();
        let now = self.config.clock.now();
        let admitted = self.capacity.lock().try_write_all(&writes, now);
        if let Err(refused) = admitted {
            let mut stats = self.stats.lock();
            for (action, reason) in actions.iter().zip(&refused) {
                if let Some(reason) = reason {
                    stats.throttled(&action.table, action.pk.as_deref(), *reason, 1, now);
                }
            }
            return ddb::transaction_throttled(&refused);
        }
        let reply = self.forward(call, None).await;
        let made = matches!(&reply, Ok(r) if r.status.is_success());
        let by_condition = matches!(&reply, Ok(r) if cancelled_by_condition(r));
        for (action, reserved) in actions.iter().zip(reserved) {
            let actual = if made {
                let after = match (&action.kind, &action.key) {
                    (Kind::Update, Some(key)) => self.stored_size(call, &action.table, key).await,
                    _ => 0,
                };
                2.0 * action.units(after)
            } else if by_condition {
                write_cost(action.before)
            } else {
                0.0
            };
            let written = made && action.kind != Kind::ConditionCheck;
            self.settle_write(
                &action.table,
                action.pk.as_deref(),
                reserved,
                actual,
                written,
            );
        }
        match reply {
            Ok(reply) => reply.into_response(),
            Err(answer) => answer,
        }
    }

    /// The actions of a `TransactWriteItems`; `None` when one cannot be read.
    async fn write_actions(&self, call: &Call, json: &Value) -> Option<Vec<Action>> {
        let mut actions = Vec::new();
        for entry in json.get("TransactItems")?.as_array()? {
            let (kind, body) = [
                ("Put", Kind::Put),
                ("Update", Kind::Update),
                ("Delete", Kind::Delete),
                ("ConditionCheck", Kind::ConditionCheck),
            ]
            .into_iter()
            .find_map(|(name, kind)| Some((kind, entry.get(name)?)))?;
            let table = body.get("TableName")?.as_str()?.to_owned();
            let pk_attr = self.pk_attr(call, &table).await;
            let action = if kind == Kind::Put {
                let item = body.get("Item")?.as_object()?;
                Action {
                    kind,
                    key: self.item_key(call, &table, item).await,
                    pk: item.get(&pk_attr).and_then(key_string),
                    new: item_size(item),
                    before: 0,
                    table,
                }
            } else {
                let key = body.get("Key")?.as_object()?;
                Action {
                    kind,
                    pk: key.get(&pk_attr).and_then(key_string),
                    key: Some(key.clone()),
                    new: 0,
                    before: 0,
                    table,
                }
            };
            actions.push(action);
        }
        Some(actions)
    }

    pub(super) async fn transact_get(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(call.op());
        }
        let Some(gets) = self.get_actions(call, json).await else {
            return self.passthrough(call).await;
        };
        let now = self.config.clock.now();
        let refused: Vec<Option<ThrottleReason>> = {
            let mut capacity = self.capacity.lock();
            gets.iter()
                .map(|g| {
                    let pk = g.pk.as_deref();
                    capacity
                        .check_read(&g.table, pk, MIN_TRANSACTIONAL_READ, now)
                        .err()
                })
                .collect()
        };
        if refused.iter().any(Option::is_some) {
            let mut stats = self.stats.lock();
            for (get, reason) in gets.iter().zip(&refused) {
                if let Some(reason) = reason {
                    stats.throttled(&get.table, get.pk.as_deref(), *reason, 1, now);
                }
            }
            return ddb::transaction_throttled(&refused);
        }
        let reply = match self.forward(call, None).await {
            Ok(reply) => reply,
            Err(answer) => return answer,
        };
        if reply.status.is_success() {
            let answer = reply.json();
            let responses = answer.as_ref().and_then(|v| v.get("Responses")?.as_array());
            for (i, get) in gets.iter().enumerate() {
                let bytes = if get.projected {
                    self.stored_size(call, &get.table, &get.key).await
                } else {
                    responses
                        .and_then(|r| r.get(i)?.get("Item")?.as_object())
                        .map_or(0, item_size)
                };
                let pk = get.pk.as_deref();
                self.charge_read(&get.table, pk, 2.0 * read_cost(bytes, true));
            }
        }
        reply.into_response()
    }

    /// The `Get`s of a `TransactGetItems`; `None` when one cannot be read.
    async fn get_actions(&self, call: &Call, json: &Value) -> Option<Vec<Get>> {
        let mut gets = Vec::new();
        for entry in json.get("TransactItems")?.as_array()? {
            let body = entry.get("Get")?;
            let table = body.get("TableName")?.as_str()?.to_owned();
            let key = body.get("Key")?.as_object()?;
            let pk_attr = self.pk_attr(call, &table).await;
            gets.push(Get {
                pk: key.get(&pk_attr).and_then(key_string),
                key: key.clone(),
                projected: body.get("ProjectionExpression").is_some()
                    || body.get("AttributesToGet").is_some(),
                table,
            });
        }
        Some(gets)
    }
}

/// Whether the upstream cancelled a transaction because a condition failed.
fn cancelled_by_condition(reply: &Reply) -> bool {
    let Some(body) = reply.json() else {
        return false;
    };
    ddb::error_name(&body) == Some("TransactionCanceledException")
        && body
            .get("CancellationReasons")
            .and_then(Value::as_array)
            .is_some_and(|reasons| {
                reasons.iter().any(|r| {
                    r.get("Code").and_then(Value::as_str) == Some("ConditionalCheckFailed")
                })
            })
}
