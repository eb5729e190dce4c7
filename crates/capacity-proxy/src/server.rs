//! The HTTP server: routing, charging, forwarding, the sink, and the proxy's lifecycle.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::Rng;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::capacity::{CapacityModel, ThrottleReason, read_cost, write_cost};
use crate::config::{Mode, ProxyConfig};
use crate::ddb;
use crate::error::ProxyError;
use crate::faults::{CallFault, FaultInjector};
use crate::item::{item_size, key_string, query_partition_key};
use crate::stats::{HeatRow, Stats, StatsSnapshot};

const TARGET_PREFIX: &str = "DynamoDB_20120810.";
/// Stats label for writes whose partition key could not be read.
const UNKNOWN_PK: &str = "?";

type Body = Full<Bytes>;

/// One key held by the sink.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SinkKey {
    /// Table name.
    pub table: String,
    /// Partition key value.
    pub pk: String,
    /// Sort key value, when the item has the table's sort key attribute.
    pub sk: Option<String>,
}

/// Entry point: `Proxy::start(config)`.
#[derive(Debug)]
pub struct Proxy;

impl Proxy {
    /// Binds `config.listen` and serves until [`ProxyHandle::shutdown`].
    pub async fn start(config: ProxyConfig) -> Result<ProxyHandle, ProxyError> {
        config.validate()?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ProxyError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
            addr: config.listen,
            source,
        })?;
        let heat_file = match &config.heat_csv {
            Some(path) => {
                let mut f = std::fs::File::create(path)?;
                f.write_all(HeatRow::HEADER.as_bytes())?;
                Some(f)
            }
            None => None,
        };
        let seed = config.seed.unwrap_or_else(|| rand::rng().random());
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(256)
            .build(connector);
        let per_table = config
            .tables
            .iter()
            .map(|(t, c)| (t.clone(), c.limits(config.limits)))
            .collect();
        let inner = Arc::new(Inner {
            capacity: Mutex::new(CapacityModel::new(config.limits, per_table)),
            stats: Mutex::new(Stats::new(heat_file.is_some())),
            faults: FaultInjector::new(config.faults, seed),
            sink: Mutex::new(HashSet::new()),
            pk_cache: Mutex::new(HashMap::new()),
            client,
            config,
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let server = tokio::spawn(accept_loop(listener, inner.clone(), shutdown_rx.clone()));
        let maintenance = tokio::spawn(maintenance_loop(inner.clone(), heat_file, shutdown_rx));
        tracing::info!(%addr, seed, "capacity-proxy listening");
        Ok(ProxyHandle {
            addr,
            inner,
            shutdown_tx,
            server,
            maintenance,
        })
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct ProxyHandle {
    /// The bound address.
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    shutdown_tx: watch::Sender<bool>,
    server: JoinHandle<()>,
    maintenance: JoinHandle<Result<(), ProxyError>>,
}

impl ProxyHandle {
    /// `http://ADDR`, the endpoint URL to give an SDK.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// All counters, every key included.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.snapshot(None)
    }

    /// The keys the sink holds, sorted.
    pub fn sink_keys(&self) -> Vec<SinkKey> {
        let mut keys: Vec<_> = lock(&self.inner.sink).iter().cloned().collect();
        keys.sort();
        keys
    }

    /// Stops accepting, closes connections, writes the last heat rows.
    pub async fn shutdown(self) -> Result<(), ProxyError> {
        // Receivers may already be gone if the tasks ended; nothing to signal then.
        let _ = self.shutdown_tx.send(true);
        if let Err(e) = self.server.await {
            tracing::warn!("accept loop ended abnormally: {e}");
        }
        match self.maintenance.await {
            Ok(r) => r,
            Err(e) => Err(ProxyError::HeatCsv(std::io::Error::other(e))),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a counter lock leaves counters usable; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn accept_loop(
    listener: TcpListener,
    inner: Arc<Inner>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Usually fd exhaustion; back off briefly instead of spinning.
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let inner = inner.clone();
                let mut shutdown = shutdown.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let inner = inner.clone();
                        async move { inner.handle(req).await }
                    });
                    let conn = http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::pin!(conn);
                    tokio::select! {
                        r = conn.as_mut() => {
                            if let Err(e) = r {
                                tracing::debug!("connection: {e}");
                            }
                        }
                        _ = shutdown.changed() => {
                            conn.as_mut().graceful_shutdown();
                            let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
                        }
                    }
                });
            }
        }
    }
}

async fn maintenance_loop(
    inner: Arc<Inner>,
    mut heat_file: Option<std::fs::File>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ProxyError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let stop = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.changed() => true,
        };
        let now = inner.config.clock.now();
        {
            let mut cap = lock(&inner.capacity);
            // Idle keys hold full buckets and carry no state worth keeping.
            if cap.tracked_keys() > 10_000 {
                cap.prune(now);
            }
        }
        if let Some(file) = &mut heat_file {
            let rows = lock(&inner.stats).drain_heat(if stop { None } else { Some(now.as_secs()) });
            if !rows.is_empty() {
                let text: String = rows.iter().map(|r| r.to_csv_line()).collect();
                file.write_all(text.as_bytes())?;
                file.flush()?;
            }
        }
        if stop {
            return Ok(());
        }
    }
}

fn is_data_plane(op: &str) -> bool {
    matches!(
        op,
        "BatchWriteItem"
            | "PutItem"
            | "UpdateItem"
            | "DeleteItem"
            | "GetItem"
            | "BatchGetItem"
            | "Query"
            | "Scan"
            | "TransactWriteItems"
            | "TransactGetItems"
    )
}

fn is_read(op: &str) -> bool {
    matches!(
        op,
        "GetItem" | "BatchGetItem" | "Query" | "Scan" | "TransactGetItems"
    )
}

fn hop_by_hop(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "content-length"
            | "connection"
            | "transfer-encoding"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

/// The request as received, kept for forwarding.
struct Call {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    op: String,
}

/// An upstream reply, fully read.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn into_response(self) -> Response<Body> {
        let mut resp = Response::new(Full::new(self.body));
        *resp.status_mut() = self.status;
        *resp.headers_mut() = self.headers;
        resp
    }

    fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

#[derive(Debug)]
struct Inner {
    config: ProxyConfig,
    client: Client<HttpConnector, Body>,
    capacity: Mutex<CapacityModel>,
    stats: Mutex<Stats>,
    faults: FaultInjector,
    sink: Mutex<HashSet<SinkKey>>,
    pk_cache: Mutex<HashMap<String, String>>,
}

/// One write request of a BatchWriteItem, parsed.
/// One write request of a `BatchWriteItem`, borrowing the parsed body (in sink mode
/// nothing of it is copied but the keys).
struct WriteReq<'a> {
    table: &'a str,
    request: &'a Value,
    pk: Option<String>,
    sk: Option<String>,
    bytes: usize,
    delete: bool,
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

impl Inner {
    fn snapshot(&self, top: Option<usize>) -> StatsSnapshot {
        let sink_items = lock(&self.sink).len() as u64;
        let now = self.config.clock.now();
        lock(&self.stats).snapshot(now, top, sink_items)
    }

    /// Answers one request; a data-plane call's time in the proxy is recorded
    /// ([`crate::stats::ServiceTime`]).
    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<Body>, ProxyError> {
        let started = std::time::Instant::now();
        let mut asleep = None;
        let inner = Arc::clone(&self);
        let response = inner.answer(req, started, &mut asleep).await;
        if let Some(asleep) = asleep {
            lock(&self.stats).served(started.elapsed(), asleep);
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
        arrived: std::time::Instant,
        asleep: &mut Option<Duration>,
    ) -> Result<Response<Body>, ProxyError> {
        if req.method() == Method::GET && req.uri().path() == "/__stats" {
            let top = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("top=")))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(20);
            let snap = self.snapshot(if top == 0 { None } else { Some(top) });
            let body = serde_json::to_value(&snap).unwrap_or(Value::Null);
            let mut resp = ddb::json_response(StatusCode::OK, &body);
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return Ok(resp);
        }
        let op = req
            .headers()
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .and_then(|t| t.strip_prefix(TARGET_PREFIX))
            .map(str::to_owned);
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return Err(ProxyError::Upstream(format!("reading request body: {e}"))),
        };
        let Some(op) = op else {
            let call = Call {
                method: parts.method,
                uri: parts.uri,
                headers: parts.headers,
                body,
                op: String::new(),
            };
            return Ok(self.passthrough(&call).await);
        };
        lock(&self.stats).request(&op);
        let call = Call {
            method: parts.method,
            uri: parts.uri,
            headers: parts.headers,
            body,
            op,
        };
        let json: Option<Value> = serde_json::from_slice(&call.body).ok();

        if is_data_plane(&call.op) {
            let plan = self.faults.plan_call();
            let early = if plan.fault == CallFault::None && self.config.mode == Mode::Sink {
                Some(self.respond(&call, json.as_ref()).await)
            } else {
                None
            };
            let mut slept = Duration::ZERO;
            if !plan.latency.is_zero() {
                lock(&self.stats).faults_mut().latency += 1;
                slept = crate::faults::wait_latency(plan.latency.saturating_sub(arrived.elapsed()))
                    .await;
            }
            *asleep = Some(slept);
            if let Some(response) = early {
                return Ok(response);
            }
            match plan.fault {
                CallFault::None => {}
                CallFault::Drop => {
                    lock(&self.stats).faults_mut().drop += 1;
                    // An error from the service makes hyper close the connection unanswered.
                    return Err(ProxyError::Dropped);
                }
                CallFault::Error => {
                    lock(&self.stats).faults_mut().error += 1;
                    return Ok(ddb::internal_error(
                        "Internal server error (capacity-proxy injected fault)",
                    ));
                }
                CallFault::Throttle => {
                    lock(&self.stats).faults_mut().throttle += 1;
                    let table = json.as_ref().and_then(table_of).unwrap_or_default();
                    let reason = if is_read(&call.op) {
                        ThrottleReason::TableReadKeyRangeThroughputExceeded
                    } else {
                        ThrottleReason::TableWriteKeyRangeThroughputExceeded
                    };
                    return Ok(ddb::throttle_response(
                        &[reason],
                        &self.config.table_arn(&table),
                    ));
                }
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
        match call.op.as_str() {
            "BatchWriteItem" => self.batch_write(call, json).await,
            "PutItem" => self.put_item(call, json).await,
            "UpdateItem" => self.update_item(call, json).await,
            "GetItem" => self.get_item(call, json).await,
            "Query" => self.query(call, json).await,
            "CreateTable" => self.create_table(call, json).await,
            "DeleteTable" => {
                if let Some(t) = table_of(json) {
                    lock(&self.pk_cache).remove(&t);
                }
                self.passthrough(call).await
            }
            _ => self.passthrough(call).await,
        }
    }

    fn sink_unsupported(&self, op: &str) -> Response<Body> {
        ddb::validation_error(&format!(
            "capacity-proxy in sink mode answers only BatchWriteItem and PutItem; {op} is not supported"
        ))
    }

    /// Sends a request upstream; `body` replaces the received body when given.
    async fn send(
        &self,
        call: &Call,
        body: Option<Bytes>,
        target: Option<&str>,
    ) -> Result<Reply, ProxyError> {
        let Mode::Forward { upstream } = &self.config.mode else {
            return Err(ProxyError::Upstream("sink mode has no upstream".into()));
        };
        let authority = upstream
            .authority()
            .ok_or_else(|| ProxyError::Config("upstream has no host".into()))?;
        let path = call.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = Uri::builder()
            .scheme("http")
            .authority(authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        let mut req = Request::new(Full::new(body.unwrap_or_else(|| call.body.clone())));
        *req.method_mut() = call.method.clone();
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        for (k, v) in &call.headers {
            if !hop_by_hop(k) {
                headers.append(k.clone(), v.clone());
            }
        }
        if let Some(target) = target {
            let v = HeaderValue::from_str(&format!("{TARGET_PREFIX}{target}"))
                .map_err(|e| ProxyError::Upstream(e.to_string()))?;
            headers.insert("x-amz-target", v);
        }
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        headers.insert(header::HOST, host);
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| ProxyError::Upstream(format!("{e:?}")))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| ProxyError::Upstream(e.to_string()))?
            .to_bytes();
        let mut headers = parts.headers;
        let names: Vec<_> = headers.keys().filter(|k| hop_by_hop(k)).cloned().collect();
        for name in names {
            headers.remove(name);
        }
        Ok(Reply {
            status: parts.status,
            headers,
            body,
        })
    }

    async fn forward(&self, call: &Call, body: Option<Bytes>) -> Result<Reply, Response<Body>> {
        self.send(call, body, None).await.map_err(|e| {
            tracing::warn!(op = %call.op, "upstream failed: {e}");
            ddb::internal_error(&format!("capacity-proxy upstream failed: {e}"))
        })
    }

    async fn passthrough(&self, call: &Call) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(&call.op);
        }
        match self.forward(call, None).await {
            Ok(reply) => reply.into_response(),
            Err(resp) => resp,
        }
    }

    /// Partition key attribute of `table`: configured, cached, learned from DescribeTable
    /// upstream (with the caller's own auth headers), or the default.
    async fn pk_attr(&self, call: &Call, table: &str) -> String {
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

    async fn create_table(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(&call.op);
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

    async fn batch_write(&self, call: &Call, json: &Value) -> Response<Body> {
        let Some(request_items) = json.get("RequestItems").and_then(Value::as_object) else {
            return match self.config.mode {
                Mode::Sink => ddb::validation_error("RequestItems is required"),
                Mode::Forward { .. } => self.passthrough(call).await,
            };
        };
        // Parse and validate everything before charging anything.
        let reqs = match self.write_requests(call, request_items).await {
            Ok(reqs) => reqs,
            Err(refusal) => return refusal,
        };
        if reqs.is_empty() {
            return match self.config.mode {
                Mode::Sink => ddb::validation_error("RequestItems must not be empty"),
                Mode::Forward { .. } => self.passthrough(call).await,
            };
        }
        let charged = self.charge_batch(&reqs);
        if charged.accepted.is_empty() {
            if charged.throttled == reqs.len() {
                let reasons: Vec<_> = charged.reasons.into_iter().collect();
                return ddb::throttle_response(
                    &reasons,
                    &self
                        .config
                        .table_arn(charged.throttled_table.unwrap_or_default()),
                );
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
        let mut cap = lock(&self.capacity);
        let mut stats = lock(&self.stats);
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

    /// Applies accepted writes to the sink's key set.
    fn store_in_sink(&self, accepted: &[&WriteReq<'_>]) {
        let mut sink = lock(&self.sink);
        for req in accepted {
            let key = SinkKey {
                table: req.table.to_owned(),
                pk: req.pk.clone().unwrap_or_else(|| UNKNOWN_PK.to_owned()),
                sk: req.sk.clone(),
            };
            if req.delete {
                sink.remove(&key);
            } else {
                sink.insert(key);
            }
        }
    }

    /// Charges a single-item write; `Err` is the throttle response.
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

    async fn put_item(&self, call: &Call, json: &Value) -> Response<Body> {
        let (Some(table), Some(item)) =
            (table_of(json), json.get("Item").and_then(Value::as_object))
        else {
            return match self.config.mode {
                Mode::Sink => ddb::validation_error("TableName and Item are required"),
                Mode::Forward { .. } => self.passthrough(call).await,
            };
        };
        let pk_attr = self.pk_attr(call, &table).await;
        let pk = item.get(&pk_attr).and_then(key_string);
        if let Err(reason) = self.charge_single_write(&table, pk.as_deref(), item_size(item)) {
            return ddb::throttle_response(&[reason], &self.config.table_arn(&table));
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

    async fn update_item(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(&call.op);
        }
        let (Some(table), Some(key)) = (table_of(json), json.get("Key").and_then(Value::as_object))
        else {
            return self.passthrough(call).await;
        };
        let pk_attr = self.pk_attr(call, &table).await;
        let pk = key.get(&pk_attr).and_then(key_string);
        // The resulting item is unknown before the write: estimate it as the key plus the
        // values the update expression carries.
        let values = json
            .get("ExpressionAttributeValues")
            .and_then(Value::as_object)
            .map_or(0, item_size);
        if let Err(reason) =
            self.charge_single_write(&table, pk.as_deref(), item_size(key) + values)
        {
            return ddb::throttle_response(&[reason], &self.config.table_arn(&table));
        }
        self.passthrough(call).await
    }

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

    fn charge_read(&self, table: &str, pk: Option<&str>, bytes: usize, consistent: bool) {
        let now = self.config.clock.now();
        let cost = read_cost(bytes, consistent);
        lock(&self.capacity).charge_read(table, pk, cost, now);
        lock(&self.stats).read(table, pk.unwrap_or(UNKNOWN_PK), cost, now);
    }

    async fn get_item(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(&call.op);
        }
        let (Some(table), Some(key)) = (table_of(json), json.get("Key").and_then(Value::as_object))
        else {
            return self.passthrough(call).await;
        };
        let pk_attr = self.pk_attr(call, &table).await;
        let pk = key.get(&pk_attr).and_then(key_string);
        let consistent = json.get("ConsistentRead").and_then(Value::as_bool) == Some(true);
        if let Err(reason) = self.check_read(&table, pk.as_deref(), consistent) {
            return ddb::throttle_response(&[reason], &self.config.table_arn(&table));
        }
        let reply = match self.forward(call, None).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        if reply.status.is_success() {
            let bytes = reply
                .json()
                .and_then(|v| v.get("Item").and_then(Value::as_object).map(item_size))
                .unwrap_or(0);
            self.charge_read(&table, pk.as_deref(), bytes, consistent);
        }
        reply.into_response()
    }

    async fn query(&self, call: &Call, json: &Value) -> Response<Body> {
        if self.config.mode == Mode::Sink {
            return self.sink_unsupported(&call.op);
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
        let consistent = json.get("ConsistentRead").and_then(Value::as_bool) == Some(true);
        if let Err(reason) = self.check_read(&table, pk.as_deref(), consistent) {
            return ddb::throttle_response(&[reason], &self.config.table_arn(&table));
        }
        let reply = match self.forward(call, None).await {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        if reply.status.is_success() {
            let bytes = reply
                .json()
                .and_then(|v| {
                    v.get("Items").and_then(Value::as_array).map(|items| {
                        items
                            .iter()
                            .filter_map(Value::as_object)
                            .map(item_size)
                            .sum::<usize>()
                    })
                })
                .unwrap_or(0);
            self.charge_read(&table, pk.as_deref(), bytes, consistent);
        }
        reply.into_response()
    }
}

/// `TableName`, or the first table of `RequestItems`.
fn table_of(json: &Value) -> Option<String> {
    json.get("TableName")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            json.get("RequestItems")
                .and_then(Value::as_object)
                .and_then(|m| m.keys().next().cloned())
        })
}

/// The HASH attribute of a `KeySchema` list.
fn hash_key_of(schema: &Value) -> Option<String> {
    schema.as_array()?.iter().find_map(|k| {
        (k.get("KeyType")?.as_str()? == "HASH")
            .then(|| k.get("AttributeName")?.as_str().map(str::to_owned))
            .flatten()
    })
}
