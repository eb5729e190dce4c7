//! `BatchWriteItem`: every write request parsed and sized before any is charged, each
//! charged against its key's and table's capacity (after the injected unprocessed-items
//! fault), the accepted ones stored in the sink or forwarded, and the rest answered in
//! `UnprocessedItems`.

use std::collections::BTreeSet;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use serde_json::{Map, Value, json};

use super::request::Call;
use super::upstream::Reply;
use super::{Body, Inner, UNKNOWN_PK};
use crate::capacity::{ThrottleReason, write_cost};
use crate::config::Mode;
use crate::ddb;
use crate::item::{item_size, key_string};

/// One write request of a `BatchWriteItem`, borrowing the parsed body (in sink mode
/// nothing of it is copied but the keys).
pub(super) struct WriteReq<'a> {
    pub(super) table: &'a str,
    request: &'a Value,
    pub(super) pk: Option<String>,
    pub(super) sk: Option<String>,
    bytes: usize,
    pub(super) delete: bool,
}

/// A `BatchWriteItem`'s requests after charging.
#[derive(Default)]
struct Charged<'r, 'a> {
    /// Accepted requests as a `RequestItems` body to forward (forward mode).
    forward: Map<String, Value>,
    /// Requests not written: throttled, or held back by the injected fault.
    unprocessed: Map<String, Value>,
    accepted: Vec<&'r WriteReq<'a>>,
    reasons: BTreeSet<ThrottleReason>,
    throttled: usize,
    throttled_table: Option<&'a str>,
}

impl Inner {
    pub(super) async fn batch_write(&self, call: &Call, json: &Value) -> Response<Body> {
        let Some(request_items) = json.get("RequestItems").and_then(Value::as_object) else {
            return self.malformed(call, "RequestItems is required").await;
        };
        // Parse and validate everything before charging anything.
        let reqs = match self.write_requests(call, request_items).await {
            Ok(reqs) => reqs,
            Err(refusal) => return refusal,
        };
        if reqs.is_empty() {
            return self.malformed(call, "RequestItems must not be empty").await;
        }
        let charged = self.charge_batch(&reqs);
        if charged.accepted.is_empty() {
            if charged.throttled == reqs.len() {
                let reasons: Vec<_> = charged.reasons.into_iter().collect();
                return self.throttled(&reasons, charged.throttled_table.unwrap_or_default());
            }
            return unprocessed_only(charged.unprocessed);
        }
        if self.config.mode == Mode::Sink {
            self.store_in_sink(&charged.accepted);
            return unprocessed_only(charged.unprocessed);
        }
        // Upstream gets only what was accepted; what was not joins its own answer's
        // UnprocessedItems.
        let body = if charged.unprocessed.is_empty() {
            None
        } else {
            let mut rewritten = json.clone();
            if let Some(obj) = rewritten.as_object_mut() {
                obj.insert("RequestItems".into(), Value::Object(charged.forward));
            }
            Some(Bytes::from(rewritten.to_string()))
        };
        match self.forward(call, body).await {
            Ok(reply) => with_unprocessed(reply, charged.unprocessed),
            Err(resp) => resp,
        }
    }

    /// The write requests of a `BatchWriteItem`'s `RequestItems`, each with its key and
    /// size; `Err` is the validation error to answer.
    async fn write_requests<'a>(
        &self,
        call: &Call,
        request_items: &'a Map<String, Value>,
    ) -> Result<Vec<WriteReq<'a>>, Response<Body>> {
        let mut reqs = Vec::new();
        for (table, list) in request_items {
            let pk_attr = self.pk_attr(call, table).await;
            let sk_attr = self.config.sk_attr(table).to_owned();
            let Some(list) = list.as_array() else {
                return Err(ddb::validation_error("RequestItems values must be lists"));
            };
            for request in list {
                let (key_src, bytes, delete) = if let Some(item) = request
                    .pointer("/PutRequest/Item")
                    .and_then(Value::as_object)
                {
                    (item, item_size(item), false)
                } else if let Some(key) = request
                    .pointer("/DeleteRequest/Key")
                    .and_then(Value::as_object)
                {
                    // The deleted item's size is unknown here: charge the minimum, 1 WCU.
                    (key, 0, true)
                } else {
                    return Err(ddb::validation_error(
                        "each write request needs PutRequest.Item or DeleteRequest.Key",
                    ));
                };
                reqs.push(WriteReq {
                    table,
                    request,
                    pk: key_src.get(&pk_attr).and_then(key_string),
                    sk: key_src.get(&sk_attr).and_then(key_string),
                    bytes,
                    delete,
                });
            }
        }
        Ok(reqs)
    }

    /// Charges each request against its key's and table's capacity (after the injected
    /// unprocessed-items fault), and sorts them into accepted and unprocessed.
    fn charge_batch<'r, 'a>(&self, reqs: &'r [WriteReq<'a>]) -> Charged<'r, 'a> {
        let forced = self.faults.unprocessed(reqs.len());
        let now = self.config.clock.now();
        let mut charged = Charged::default();
        let mut cap = self.capacity.lock();
        let mut stats = self.stats.lock();
        let sink = self.config.mode == Mode::Sink;
        for (req, forced) in reqs.iter().zip(forced) {
            let push = |m: &mut Map<String, Value>| {
                if let Value::Array(a) = m
                    .entry(req.table.to_owned())
                    .or_insert_with(|| Value::Array(Vec::new()))
                {
                    a.push(req.request.clone());
                }
            };
            if forced {
                stats.faults_mut().unprocessed_items += 1;
                push(&mut charged.unprocessed);
                continue;
            }
            let cost = write_cost(req.bytes);
            match cap.try_write(req.table, req.pk.as_deref(), cost, now) {
                Ok(()) => {
                    stats.write(
                        req.table,
                        req.pk.as_deref().unwrap_or(UNKNOWN_PK),
                        cost,
                        now,
                    );
                    // The sink stores keys only: no forwarded body to build.
                    if !sink {
                        push(&mut charged.forward);
                    }
                    charged.accepted.push(req);
                }
                Err(reason) => {
                    stats.throttled(req.table, req.pk.as_deref(), reason, 1, now);
                    charged.reasons.insert(reason);
                    charged.throttled += 1;
                    charged.throttled_table.get_or_insert(req.table);
                    push(&mut charged.unprocessed);
                }
            }
        }
        charged
    }
}

/// A `BatchWriteItem` answer whose only news is `unprocessed`.
fn unprocessed_only(unprocessed: Map<String, Value>) -> Response<Body> {
    ddb::json_response(StatusCode::OK, &json!({ "UnprocessedItems": unprocessed }))
}

/// Upstream's answer to the accepted writes, with `unprocessed` added to its own
/// `UnprocessedItems` (and its headers, minus the checksum of the body replaced).
fn with_unprocessed(reply: Reply, unprocessed: Map<String, Value>) -> Response<Body> {
    if unprocessed.is_empty() || !reply.status.is_success() {
        return reply.into_response();
    }
    let Some(mut merged) = reply.json() else {
        return reply.into_response();
    };
    if let Some(obj) = merged.as_object_mut() {
        let up = obj
            .entry("UnprocessedItems")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(up) = up {
            for (table, items) in unprocessed {
                let Value::Array(items) = items else { continue };
                if let Value::Array(list) =
                    up.entry(table).or_insert_with(|| Value::Array(Vec::new()))
                {
                    list.extend(items);
                }
            }
        }
    }
    let mut resp = ddb::json_response(reply.status, &merged);
    for (k, v) in &reply.headers {
        if k != "x-amz-crc32" && k != header::CONTENT_TYPE {
            resp.headers_mut().insert(k.clone(), v.clone());
        }
    }
    resp
}
