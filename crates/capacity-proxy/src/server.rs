//! The HTTP server, read as the flow of one request: the stats page answers itself
//! ([`stats_page`]); any other request is read whole ([`request`]); a call without a
//! DynamoDB target is forwarded as it is ([`upstream`]); a data-plane call then meets
//! its injected faults ([`injected`]); and the operation is answered: writes charged
//! ([`writes`], [`batch`]) by the items they replace, looked up upstream ([`stored`]),
//! reads checked and charged ([`reads`]), transactions charged twice ([`transact`]), key
//! schemas learned ([`keys`]), stored in the sink ([`sink`]) or forwarded upstream. Starting and
//! stopping the proxy is [`lifecycle`].

mod batch;
mod injected;
mod keys;
mod lifecycle;
mod reads;
mod request;
mod sink;
mod stats_page;
mod stored;
mod transact;
mod upstream;
mod writes;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::Value;

use crate::capacity::{CapacityModel, ThrottleReason};
use crate::config::{Mode, ProxyConfig};
use crate::ddb;
use crate::error::ProxyError;
use crate::faults::{CallFault, FaultInjector};
use crate::stats::{Stats, StatsSnapshot};

pub use lifecycle::{Proxy, ProxyHandle};
use request::Call;
pub use sink::SinkKey;

/// Stats label for writes whose partition key could not be read.
const UNKNOWN_PK: &str = "?";

type Body = Full<Bytes>;

/// What every request shares: the configuration, the upstream client, the capacity and
/// the counters, the injected faults, the sink's keys and the learned key attributes.
#[derive(Debug)]
struct Inner {
    config: ProxyConfig,
    client: Client<HttpConnector, Body>,
    capacity: Mutex<CapacityModel>,
    stats: Mutex<Stats>,
    faults: FaultInjector,
    sink: Mutex<HashSet<SinkKey>>,
    key_schemas: Mutex<HashMap<String, keys::KeySchema>>,
}

impl Inner {
    fn snapshot(&self, top: Option<usize>) -> StatsSnapshot {
        let sink_items = self.sink.lock().len() as u64;
        let now = self.config.clock.now();
        self.stats.lock().snapshot(now, top, sink_items)
    }

    /// Answers one request; a data-plane call's time in the proxy is recorded
    /// ([`crate::stats::ServiceTime`]).
    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<Body>, ProxyError> {
        let started = Instant::now();
        let mut asleep = None;
        let inner = Arc::clone(&self);
        let response = inner.answer(req, started, &mut asleep).await;
        if let Some(asleep) = asleep {
            self.stats.lock().served(started.elapsed(), asleep);
        }
        response
    }

    /// [`Inner::handle`] without the timing: `asleep` is set for a data-plane call, to
    /// the time it slept for injected latency. The latency counts from `arrived`, so
    /// the proxy's own reading and parsing of the request fall within it; in sink mode,
    /// which answers from the request alone, so does the whole answer (sizing, charging,
    /// storing): it is made first and sent when the latency is over. A call then takes
    /// the latency asked for, not the latency plus the emulator's own work.
    async fn answer(
        self: Arc<Self>,
        req: Request<Incoming>,
        arrived: Instant,
        asleep: &mut Option<Duration>,
    ) -> Result<Response<Body>, ProxyError> {
        if stats_page::is_stats_page(&req) {
            return Ok(self.stats_page(req.uri()));
        }
        let call = Call::read(req).await?;
        let Some(op) = call.op.as_deref() else {
            // Not a DynamoDB call: forwarded as it is, uncounted.
            return Ok(self.passthrough(&call).await);
        };
        self.stats.lock().request(op);
        let json: Option<Value> = serde_json::from_slice(&call.body).ok();

        if request::is_data_plane(op) {
            let plan = self.faults.plan_call();
            // The sink's answer is made before the latency is waited out.
            let early = if plan.fault == CallFault::None && self.config.mode == Mode::Sink {
                Some(self.respond(&call, json.as_ref()).await)
            } else {
                None
            };
            *asleep = Some(self.wait_latency(plan.latency, arrived).await);
            if let Some(response) = early {
                return Ok(response);
            }
            if let Some(faulted) = self.inject(plan.fault, &call, json.as_ref()) {
                return faulted;
            }
        }
        Ok(self.respond(&call, json.as_ref()).await)
    }

    /// The answer to `call`, whose body is `json` when it parsed.
    async fn respond(&self, call: &Call, json: Option<&Value>) -> Response<Body> {
        let Some(json) = json else {
            return match self.config.mode {
                Mode::Forward { .. } => self.passthrough(call).await,
                Mode::Sink => ddb::error_response(
                    StatusCode::BAD_REQUEST,
                    "SerializationException",
                    "request body is not valid JSON",
                    None,
                ),
            };
        };
        match call.op() {
            "BatchWriteItem" => self.batch_write(call, json).await,
            "PutItem" => self.put_item(call, json).await,
            "UpdateItem" => self.update_item(call, json).await,
            "DeleteItem" => self.delete_item(call, json).await,
            "TransactWriteItems" => self.transact_write(call, json).await,
            "TransactGetItems" => self.transact_get(call, json).await,
            "GetItem" => self.get_item(call, json).await,
            "Query" => self.query(call, json).await,
            "CreateTable" => self.create_table(call, json).await,
            "DeleteTable" => self.delete_table(call, json).await,
            _ => self.passthrough(call).await,
        }
    }

    /// The answer to a call throttled for `reasons` on `table`.
    fn throttled(&self, reasons: &[ThrottleReason], table: &str) -> Response<Body> {
        ddb::throttle_response(reasons, &self.config.table_arn(table))
    }
}
