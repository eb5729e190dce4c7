//! `shardline-local run-local`: what Lambda's SQS event source mapping and API Gateway do in
//! AWS, in one local process, around the same handler code as the Lambdas.
//!
//! - Workers (`--max-concurrency`) long-poll the queue, gather up to `--batch-size`
//!   messages within `--batching-window`, build an `SqsEvent`, run the ingest handler
//!   in process with a deadline (`--function-timeout`), and delete what it did not
//!   report. Reported messages stay and come back after the visibility timeout; the
//!   queue's redrive moves them to the DLQ after `maxReceiveCount` receives. A handler
//!   that fails as a whole, panics or overruns its timeout deletes nothing, as in AWS.
//! - The query service answers HTTP on a loopback port (hyper, no auth: loopback only).
//! - [`Running::stop`] (SIGTERM/Ctrl-C in the binary) stops polling; batches already
//!   received are finished and deleted before the runner ends.

use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName, QueueAttributeName,
};
use bytes::Bytes;
use clap::Args;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use ingest::{Fate, Ingest, Invocation, SqsQueue};
use query::QueryService;
use query::config::CursorKeySource;
use serde::Serialize;
use store::dynamo::{DynamoShards, DynamoTable};
use store::read::DynamoReadingSource;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use shardline::env::{EnvLookup, StackArgs};

/// template.yaml `IngestBatchSize` default (the mapping's `BatchSize`).
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// template.yaml `BatchingWindow` default, seconds.
pub const DEFAULT_BATCHING_WINDOW_SECS: f64 = 1.0;
/// template.yaml `IngestTimeout` default, seconds.
pub const DEFAULT_FUNCTION_TIMEOUT_SECS: f64 = 30.0;
/// template.yaml `QueryTimeout` default: each local query request's deadline.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// template.yaml `IngestMaxConcurrency` default (`ScalingConfig.MaximumConcurrency`).
pub const DEFAULT_MAX_CONCURRENCY: usize = 20;
/// Most messages one `ReceiveMessage` returns.
const MAX_RECEIVE: usize = 10;
/// Most entries of one `DeleteMessageBatch`.
const MAX_DELETE: usize = 10;

type Service = Ingest<DynamoTable, DynamoShards, SqsQueue>;
type Query = QueryService<DynamoReadingSource, DynamoShards>;

/// Flags of `shardline-local run-local`. Its SQS client takes AWS_ENDPOINT_URL_SQS from the
/// environment or the env file when set (the demo's queues on moto beside its tables
/// on dynalite).
#[derive(Debug, Clone, Args)]
pub struct RunLocalArgs {
    /// The queue (default: QUEUE_URL from the environment or the env file).
    #[arg(long)]
    pub queue_url: Option<String>,
    #[command(flatten)]
    pub stack: StackArgs,
    /// Most messages per handler invocation (the mapping's BatchSize).
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE)]
    pub batch_size: usize,
    /// Longest wait to fill a batch once its first message arrived, seconds
    /// (the mapping's MaximumBatchingWindowInSeconds).
    #[arg(long, default_value_t = DEFAULT_BATCHING_WINDOW_SECS)]
    pub batching_window: f64,
    /// Concurrent handler invocations (the mapping's MaximumConcurrency).
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENCY)]
    pub max_concurrency: usize,
    /// The handler's deadline, seconds (the function's Timeout).
    #[arg(long, default_value_t = DEFAULT_FUNCTION_TIMEOUT_SECS)]
    pub function_timeout: f64,
    /// Long-poll wait of one ReceiveMessage, whole seconds (0..=20); it bounds how
    /// quickly a stop is noticed.
    #[arg(long, default_value_t = 1)]
    pub poll_wait: u8,
    /// Where the query API listens (loopback only).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub query_listen: SocketAddr,
    /// Do not serve the query API.
    #[arg(long)]
    pub no_query: bool,
    /// Stop once no message arrived for this many seconds and no batch is in flight.
    #[arg(long)]
    pub exit_when_idle: Option<f64>,
    /// Print the final stats as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// How the runner behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The source queue.
    pub queue_url: String,
    /// Messages per invocation.
    pub batch_size: usize,
    /// Window to fill a batch.
    pub batching_window: Duration,
    /// Concurrent invocations.
    pub max_concurrency: usize,
    /// Handler deadline.
    pub function_timeout: Duration,
    /// Long-poll wait per receive, seconds.
    pub poll_wait_secs: i32,
    /// Query API address, or none.
    pub query_listen: Option<SocketAddr>,
    /// Idle time after which the runner stops by itself.
    pub exit_when_idle: Option<Duration>,
}

impl Settings {
    /// Defaults of the template for `queue_url`, query on a free loopback port.
    pub fn new(queue_url: impl Into<String>) -> Self {
        Self {
            queue_url: queue_url.into(),
            batch_size: DEFAULT_BATCH_SIZE,
            batching_window: Duration::from_secs_f64(DEFAULT_BATCHING_WINDOW_SECS),
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            function_timeout: Duration::from_secs_f64(DEFAULT_FUNCTION_TIMEOUT_SECS),
            poll_wait_secs: 1,
            query_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            exit_when_idle: None,
        }
    }

    fn from_args(args: &RunLocalArgs, queue_url: String) -> anyhow::Result<Self> {
        let secs = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(anyhow!("--{name} must be a non-negative number of seconds"))
            }
        };
        if args.batch_size == 0 || args.batch_size > 10_000 {
            bail!("--batch-size must be 1 to 10000");
        }
        if args.max_concurrency == 0 {
            bail!("--max-concurrency must be at least 1");
        }
        if args.poll_wait > 20 {
            bail!("--poll-wait must be 0 to 20 seconds");
        }
        Ok(Self {
            queue_url,
            batch_size: args.batch_size,
            batching_window: secs("batching-window", args.batching_window)?,
            max_concurrency: args.max_concurrency,
            function_timeout: secs("function-timeout", args.function_timeout)?,
            poll_wait_secs: i32::from(args.poll_wait),
            query_listen: (!args.no_query).then_some(args.query_listen),
            exit_when_idle: args
                .exit_when_idle
                .map(|s| secs("exit-when-idle", s))
                .transpose()?,
        })
    }
}

/// What the runner did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Handler invocations.
    pub batches: u64,
    /// Messages received (redeliveries counted again).
    pub messages: u64,
    /// Messages whose readings were all written.
    pub written_messages: u64,
    /// Readings written (distinct items the batch writer stored).
    pub readings_written: u64,
    /// Messages the handler sent to the DLQ itself.
    pub dead_lettered: u64,
    /// Messages reported in `batchItemFailures` (they come back).
    pub failures_reported: u64,
    /// Messages sent back to the queue as fresh copies at their last receive (the
    /// original is deleted, the copy comes back).
    pub requeued: u64,
    /// Messages split: their stored readings acknowledged, the unwritten rest sent back
    /// as a fresh copy.
    #[serde(default)]
    pub split: u64,
    /// Invocations that failed as a whole (every message failed, a panic, a timeout):
    /// nothing of them was deleted.
    pub failed_invocations: u64,
    /// Of those, invocations that overran `--function-timeout`.
    pub timeouts: u64,
    /// Messages deleted from the queue.
    pub deleted: u64,
    /// Deletes that failed after retries (those messages come back).
    pub delete_failures: u64,
    /// ReceiveMessage calls that failed.
    pub receive_errors: u64,
    /// `BatchWriteItem` calls, retries, unprocessed items.
    pub write_calls: u64,
    /// Retried write calls.
    pub write_retries: u64,
    /// Items returned unprocessed.
    pub unprocessed_items: u64,
    /// Throttled write calls by reason.
    pub throttles: BTreeMap<String, u64>,
    /// Fan-out raises won.
    pub fanout_raises: u64,
    /// Fan-out shrinks won.
    #[serde(default)]
    pub fanout_shrinks: u64,
    /// Items given back unwritten by a raise and written under a new key.
    #[serde(default)]
    pub rekeyed: u64,
    /// DLQ sends that failed (those messages were reported).
    pub dlq_failures: u64,
    /// Milliseconds from a message's `SentTimestamp` to its deletion after a
    /// successful write, over written messages.
    #[serde(skip)]
    pub write_lags_ms: Vec<u64>,
    /// p50 of the write lag, milliseconds.
    pub write_lag_p50_ms: Option<u64>,
    /// p99 of the write lag, milliseconds.
    pub write_lag_p99_ms: Option<u64>,
}

impl Stats {
    fn finish(&mut self) {
        let mut lags = self.write_lags_ms.clone();
        lags.sort_unstable();
        let pick = |q: f64| {
            (!lags.is_empty()).then(|| {
                let i = ((lags.len() as f64 * q).ceil() as usize).clamp(1, lags.len()) - 1;
                lags[i]
            })
        };
        self.write_lag_p50_ms = pick(0.50);
        self.write_lag_p99_ms = pick(0.99);
    }

    /// The human summary, several lines.
    pub fn text(&self) -> String {
        let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{v} ms"));
        let throttles: u64 = self.throttles.values().sum();
        format!(
            "batches {}, messages {} (written {}, dead-lettered {}, reported {}, requeued {}, split {}), failed invocations {} ({} timeouts)\n\
             deleted {}, delete failures {}, receive errors {}\n\
             readings written {}, write calls {} ({} retries, {} unprocessed items, {} throttled calls), fan-out raises {} (items re-keyed {}), shrinks {}, DLQ send failures {}\n\
             write lag p50 {}, p99 {}",
            self.batches,
            self.messages,
            self.written_messages,
            self.dead_lettered,
            self.failures_reported,
            self.requeued,
            self.split,
            self.failed_invocations,
            self.timeouts,
            self.deleted,
            self.delete_failures,
            self.receive_errors,
            self.readings_written,
            self.write_calls,
            self.write_retries,
            self.unprocessed_items,
            throttles,
            self.fanout_raises,
            self.rekeyed,
            self.fanout_shrinks,
            self.dlq_failures,
            ms(self.write_lag_p50_ms),
            ms(self.write_lag_p99_ms),
        )
    }
}

/// A running runner.
#[derive(Debug)]
pub struct Running {
    query_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    stats: Arc<Mutex<Stats>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Where the query API listens.
    pub fn query_addr(&self) -> Option<SocketAddr> {
        self.query_addr
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let mut stats = lock(&self.stats).clone();
        stats.finish();
        stats
    }

    /// Asks the runner to stop: no new receives; batches in flight are finished.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// A handle that can stop the runner from elsewhere (a signal task).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// Waits until the runner ended (after [`Running::stop`] or when idle).
    pub async fn wait(self) -> anyhow::Result<Stats> {
        self.task.await.context("the runner task failed")??;
        let mut stats = lock(&self.stats).clone();
        stats.finish();
        Ok(stats)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned counter lock still holds usable counters.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Shared by the workers, the idle watch and the runner.
struct Shared {
    settings: Settings,
    sqs: aws_sdk_sqs::Client,
    ingest: Arc<Service>,
    queue_arn: String,
    region: String,
    stats: Arc<Mutex<Stats>>,
    last_activity: Mutex<Instant>,
    in_flight: AtomicUsize,
}

impl Shared {
    fn touch(&self) {
        *lock(&self.last_activity) = Instant::now();
    }
}

/// A random cursor key, for a local run without `CURSOR_KEY`: cursors then only live
/// as long as the process, which is all a local run needs.
fn ephemeral_cursor_key() -> String {
    use rand::Rng as _;
    let bytes: [u8; 32] = rand::rng().random();
    hex::encode(bytes)
}

/// Starts the runner: configuration from `env` (the same variables as the Lambdas),
/// clients for `endpoint` (or `AWS_ENDPOINT_URL`), workers, and the query API.
pub async fn start(
    settings: Settings,
    env: &EnvLookup,
    endpoint: Option<&str>,
) -> anyhow::Result<Running> {
    let mut ingest_config =
        ingest::Config::from_lookup(|name| env.get(name)).context("ingest configuration")?;
    // The queue this runner polls is the one whose redeliveries the handler delays.
    ingest_config
        .source_queue_url
        .get_or_insert_with(|| settings.queue_url.clone());
    // The handler measures arrival rates by how this runner gathers its batches.
    ingest_config.intake = ingest::config::Intake {
        batch_size: settings.batch_size,
        window: settings.batching_window,
    };
    let sdk = env.sdk_config(endpoint).await;
    let region = sdk
        .region()
        .map(ToString::to_string)
        .unwrap_or_else(|| shardline::env::DEFAULT_REGION.to_owned());
    // AWS_ENDPOINT_URL_SQS, the SDK's name for a service's own endpoint, puts the
    // queues on another server than the tables (the demo: moto for SQS, dynalite for
    // DynamoDB).
    let sqs = match env.get("AWS_ENDPOINT_URL_SQS") {
        Some(url) => aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(&sdk)
                .endpoint_url(url)
                .build(),
        ),
        None => aws_sdk_sqs::Client::new(&sdk),
    };
    // A message's shardline.* attributes count only when SQS names the ingest as its
    // sender. Locally the stand-in gives every sender one SenderId, so the runner's own
    // sends (its requeued copies) are told by what SQS reports for it.
    if ingest_config.sender_id.is_none() {
        ingest_config.sender_id = own_sender_id(&sqs).await;
    }
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let ingest = Arc::new(Ingest::from_clients(ingest_config, &dynamo, &sqs));

    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(&settings.queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| {
            anyhow!(
                "cannot read the queue {}: {}",
                settings.queue_url,
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            )
        })?
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap_or_default();

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut server = None;
    let mut query_addr = None;
    if let Some(addr) = settings.query_listen {
        if !addr.ip().is_loopback() {
            bail!("--query-listen must be a loopback address (the local API has no auth): {addr}");
        }
        let service = Arc::new(query_service(env, &dynamo)?);
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        query_addr = Some(listener.local_addr().context("no local address")?);
        server = Some(tokio::spawn(serve(listener, service, stop_rx.clone())));
    }

    let stats = Arc::new(Mutex::new(Stats::default()));
    let shared = Arc::new(Shared {
        settings,
        sqs,
        ingest,
        queue_arn,
        region,
        stats: stats.clone(),
        last_activity: Mutex::new(Instant::now()),
        in_flight: AtomicUsize::new(0),
    });
    let mut workers = JoinSet::new();
    for _ in 0..shared.settings.max_concurrency {
        workers.spawn(worker(shared.clone(), stop_rx.clone()));
    }
    if let Some(idle) = shared.settings.exit_when_idle {
        tokio::spawn(idle_watch(shared.clone(), idle, stop_tx.clone()));
    }
    let stopper = stop_tx.clone();
    let task = tokio::spawn(async move {
        let mut first_error = None;
        while let Some(done) = workers.join_next().await {
            if let Err(e) = done {
                first_error.get_or_insert_with(|| anyhow!("a worker failed: {e}"));
                // One broken worker ends the run rather than silently shrinking it.
                stopper.send_replace(true);
            }
        }
        stopper.send_replace(true);
        if let Some(server) = server {
            server.await.context("the query server failed")?;
        }
        first_error.map_or(Ok(()), Err)
    });
    Ok(Running {
        query_addr,
        stop: stop_tx,
        stats,
        task,
    })
}

/// The SenderId SQS reports for this runner's own sends, from one message to a scratch
/// queue deleted after; `None` (logged) if that fails: the handler then honours no
/// message's requeue count and dead-letters rather than requeues at the last receive.
async fn own_sender_id(sqs: &aws_sdk_sqs::Client) -> Option<String> {
    let name = format!("shardline-sender-probe-{}", std::process::id());
    let probe = async {
        let url = sqs
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .ok()?
            .queue_url?;
        let sent = sqs
            .send_message()
            .queue_url(&url)
            .message_body("sender probe")
            .send()
            .await;
        let received = match sent {
            Ok(_) => sqs
                .receive_message()
                .queue_url(&url)
                .message_system_attribute_names(MessageSystemAttributeName::SenderId)
                .send()
                .await
                .ok(),
            Err(_) => None,
        };
        let _ = sqs.delete_queue().queue_url(&url).send().await;
        received?
            .messages?
            .into_iter()
            .next()?
            .attributes?
            .remove(&MessageSystemAttributeName::SenderId)
    };
    let id = probe.await;
    if id.is_none() {
        tracing::warn!(
            "no SenderId learnt: requeue counts are not read, the last receive dead-letters"
        );
    }
    id
}

fn query_service(env: &EnvLookup, dynamo: &aws_sdk_dynamodb::Client) -> anyhow::Result<Query> {
    let mut lookup = env.clone();
    if env.get("CURSOR_KEY").is_none() && env.get("CURSOR_SECRET_ARN").is_none() {
        lookup.set("CURSOR_KEY", ephemeral_cursor_key());
    }
    let config =
        query::Config::from_lookup(|name| lookup.get(name)).context("query configuration")?;
    let key = match &config.cursor_key {
        CursorKeySource::Inline(bytes) => {
            query::CursorKey::new(bytes.clone()).map_err(|e| anyhow!("CURSOR_KEY: {e}"))?
        }
        CursorKeySource::SecretArn(arn) => {
            bail!("CURSOR_SECRET_ARN ({arn}) is not read by run-local; set CURSOR_KEY")
        }
    };
    Ok(QueryService::new(
        DynamoReadingSource::new(dynamo.clone(), &config.table_name),
        DynamoShards::new(dynamo, &config.shard_table_name),
        config.service.with_key(key),
    ))
}

async fn serve(listener: TcpListener, service: Arc<Query>, mut stop: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let service = service.clone();
                    connections.spawn(async move {
                        let handler = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                            let service = service.clone();
                            async move {
                                // As under Lambda: the reads stop by the function's
                                // timeout less the margin, and answer a page or a 400.
                                let deadline = service
                                    .config()
                                    .budget
                                    .deadline_from(QUERY_TIMEOUT, std::time::Instant::now());
                                let response = service
                                    .handle_parts_by(
                                        request.method().as_str(),
                                        request.uri().path(),
                                        request.uri().query(),
                                        Some(deadline),
                                    )
                                    .await;
                                Ok::<_, Infallible>(response.map(|body| Full::new(Bytes::from(body))))
                            }
                        });
                        if let Err(e) = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), handler)
                            .await
                        {
                            tracing::debug!(error = %e, "query connection ended");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
        while connections.try_join_next().is_some() {}
    }
    // Requests in progress get a moment to finish; idle keep-alive connections do not
    // hold the stop up.
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain)
        .await
        .is_err()
    {
        connections.abort_all();
    }
}

async fn idle_watch(shared: Arc<Shared>, idle: Duration, stop: watch::Sender<bool>) {
    let tick = (idle / 4).clamp(Duration::from_millis(50), Duration::from_millis(500));
    loop {
        tokio::time::sleep(tick).await;
        if *stop.borrow() {
            return;
        }
        let quiet = lock(&shared.last_activity).elapsed() >= idle;
        if quiet && shared.in_flight.load(Ordering::SeqCst) == 0 {
            tracing::info!(idle_secs = idle.as_secs_f64(), "idle: stopping");
            stop.send_replace(true);
            return;
        }
    }
}

async fn worker(shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            return;
        }
        let messages = gather(&shared, &stop).await;
        if messages.is_empty() {
            continue;
        }
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        invoke(&shared, messages).await;
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        shared.touch();
    }
}

/// Receives up to `batch_size` messages: the first receive long-polls; once a
/// message is held, receives continue until the batch is full or the window closed.
/// Returns what it holds when asked to stop (those are processed, not dropped).
async fn gather(shared: &Shared, stop: &watch::Receiver<bool>) -> Vec<Message> {
    let settings = &shared.settings;
    let mut held: Vec<Message> = Vec::new();
    let mut window_end: Option<Instant> = None;
    loop {
        if *stop.borrow() {
            return held;
        }
        let want = (settings.batch_size - held.len()).min(MAX_RECEIVE);
        let wait = match window_end {
            None => settings.poll_wait_secs,
            Some(end) => {
                let left = end.saturating_duration_since(Instant::now()).as_secs();
                i32::try_from(left)
                    .unwrap_or(20)
                    .min(settings.poll_wait_secs)
            }
        };
        let received = shared
            .sqs
            .receive_message()
            .queue_url(&settings.queue_url)
            .max_number_of_messages(i32::try_from(want).unwrap_or(10))
            .wait_time_seconds(wait)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await;
        match received {
            Ok(out) => {
                let got = out.messages.unwrap_or_default();
                if !got.is_empty() {
                    shared.touch();
                    window_end.get_or_insert_with(|| Instant::now() + settings.batching_window);
                    lock(&shared.stats).messages += got.len() as u64;
                }
                held.extend(got);
            }
            Err(e) => {
                lock(&shared.stats).receive_errors += 1;
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "ReceiveMessage failed");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        let window_closed = window_end.is_some_and(|end| Instant::now() >= end);
        if held.is_empty() || held.len() >= settings.batch_size || window_closed {
            return held;
        }
    }
}

/// The Lambda event for `messages`, as the event source mapping builds it.
pub fn sqs_event(messages: &[Message], queue_arn: &str, region: &str) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|m| {
            let mut record = SqsMessage::default();
            record.message_id = m.message_id.clone();
            record.receipt_handle = m.receipt_handle.clone();
            record.body = m.body.clone();
            record.md5_of_body = m.md5_of_body.clone();
            record.md5_of_message_attributes = m.md5_of_message_attributes.clone();
            record.attributes = m
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            record.message_attributes = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| {
                            let mut attr = SqsMessageAttribute::default();
                            attr.string_value = v.string_value.clone();
                            attr.string_list_values = v.string_list_values().to_vec();
                            attr.data_type = Some(v.data_type().to_owned());
                            (k.clone(), attr)
                        })
                        .collect()
                })
                .unwrap_or_default();
            record.event_source_arn = Some(queue_arn.to_owned());
            record.event_source = Some("aws:sqs".to_owned());
            record.aws_region = Some(region.to_owned());
            record
        })
        .collect();
    event
}

/// One invocation: the handler in its own task (a panic fails the invocation, not
/// the runner) under the function timeout, then deletes.
async fn invoke(shared: &Arc<Shared>, messages: Vec<Message>) {
    let event = sqs_event(&messages, &shared.queue_arn, &shared.region);
    // The same start as the Lambda binary's: the clock read once, the deadline, an RNG.
    let mut invocation = match Invocation::start(shared.settings.function_timeout) {
        Ok(invocation) => invocation,
        Err(e) => {
            tracing::error!(error = %e, "no clock; the batch is left to come back");
            lock(&shared.stats).failed_invocations += 1;
            return;
        }
    };
    let (now, deadline) = (invocation.now, invocation.deadline);
    let ingest = shared.ingest.clone();
    let runtime = tokio::runtime::Handle::current();
    // The handler's future is not `Send` (so `tokio::spawn` refuses it); a blocking
    // thread driving it with `Handle::block_on` isolates a panic all the same.
    let mut task = tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            ingest
                .process(&event, now, deadline, &mut invocation.rng)
                .await
        })
    });
    let report = match tokio::time::timeout_at(deadline, &mut task).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the handler panicked; the batch is left to come back");
            let mut stats = lock(&shared.stats);
            stats.batches += 1;
            stats.failed_invocations += 1;
            return;
        }
        Err(_) => {
            // The handler keeps its own deadline and ends soon after; its result is
            // ignored, as Lambda ignores a timed-out invocation.
            tracing::warn!("the handler overran its timeout; the batch is left to come back");
            let mut stats = lock(&shared.stats);
            stats.batches += 1;
            stats.failed_invocations += 1;
            stats.timeouts += 1;
            return;
        }
    };
    let failed: Option<HashSet<String>> = match (report.all_failed(), report.response()) {
        (None, Ok(response)) => Some(
            response
                .batch_item_failures
                .into_iter()
                .map(|f| f.item_identifier)
                .collect(),
        ),
        (Some(e), _) | (None, Err(e)) => {
            tracing::warn!(error = %e, "the invocation failed as a whole");
            None
        }
    };
    {
        let mut stats = lock(&shared.stats);
        stats.batches += 1;
        stats.readings_written += report.writes.written;
        stats.write_calls += report.writes.calls;
        stats.write_retries += report.writes.retries;
        stats.unprocessed_items += report.writes.unprocessed;
        for (reason, n) in &report.writes.throttles {
            *stats.throttles.entry(reason.clone()).or_default() += n;
        }
        stats.fanout_raises += report.fanout_raises;
        stats.fanout_shrinks += report.fanout_shrinks;
        stats.rekeyed += report.rekeyed;
        stats.dlq_failures += report.dlq_failures;
        for m in &report.messages {
            match m.fate {
                Fate::Written { .. } => stats.written_messages += 1,
                Fate::DeadLettered { .. } => stats.dead_lettered += 1,
                Fate::Reported { .. } => stats.failures_reported += 1,
                Fate::Requeued { .. } => stats.requeued += 1,
                Fate::Split { .. } => stats.split += 1,
            }
        }
        if failed.is_none() {
            stats.failed_invocations += 1;
        }
    }
    let Some(failed) = failed else { return };
    let written: HashSet<&str> = report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Written { .. }))
        .map(|m| m.message_id.as_str())
        .collect();
    let done: Vec<&Message> = messages
        .iter()
        .filter(|m| {
            m.message_id
                .as_deref()
                .is_some_and(|id| !failed.contains(id))
        })
        .collect();
    let deleted = delete(shared, &done).await;
    let now_ms = now_millis();
    let mut stats = lock(&shared.stats);
    for m in deleted {
        stats.deleted += 1;
        let sent = m
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
            .and_then(|s| s.parse::<u64>().ok());
        if let (Some(sent), Some(id)) = (sent, m.message_id.as_deref())
            && written.contains(id)
        {
            stats.write_lags_ms.push(now_ms.saturating_sub(sent));
        }
    }
}

fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Deletes `messages` in batches of ten, retrying failed entries twice; returns the
/// ones deleted. A message not deleted comes back after the visibility timeout.
async fn delete<'a>(shared: &Shared, messages: &[&'a Message]) -> Vec<&'a Message> {
    let mut deleted = Vec::with_capacity(messages.len());
    let mut failures = 0;
    for chunk in messages.chunks(MAX_DELETE) {
        let mut pending: Vec<(usize, &'a Message)> = chunk.iter().copied().enumerate().collect();
        for attempt in 0..3u32 {
            if pending.is_empty() {
                break;
            }
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
            let entries: Vec<DeleteMessageBatchRequestEntry> = pending
                .iter()
                .filter_map(|(i, m)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                        .build()
                        .ok()
                })
                .collect();
            match shared
                .sqs
                .delete_message_batch()
                .queue_url(&shared.settings.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => {
                    let ok: HashSet<&str> = out.successful().iter().map(|s| s.id()).collect();
                    pending.retain(|(i, m)| {
                        if ok.contains(i.to_string().as_str()) {
                            deleted.push(*m);
                            false
                        } else {
                            true
                        }
                    });
                }
                Err(e) => tracing::warn!(
                    error = %aws_sdk_sqs::error::DisplayErrorContext(&e),
                    "DeleteMessageBatch failed"
                ),
            }
        }
        failures += pending.len();
    }
    lock(&shared.stats).delete_failures += failures as u64;
    deleted
}

/// The command: starts the runner, prints the query address, stops on SIGTERM/Ctrl-C
/// or when idle, prints the stats.
pub async fn run(args: &RunLocalArgs) -> anyhow::Result<()> {
    use std::io::Write as _;
    let env = args.stack.env()?;
    let queue_url = match &args.queue_url {
        Some(url) => url.clone(),
        None => env.require("QUEUE_URL")?,
    };
    let settings = Settings::from_args(args, queue_url)?;
    let running = start(settings, &env, args.stack.endpoint_url.as_deref()).await?;
    if let Some(addr) = running.query_addr() {
        let mut out = std::io::stdout().lock();
        writeln!(out, "query listening on http://{addr}")?;
        out.flush()?;
    }
    let stopper = running.stopper();
    tokio::spawn(async move {
        wait_for_signal().await;
        eprintln!("stopping: finishing the batches in flight");
        stopper.send_replace(true);
    });
    let stats = running.wait().await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &stats).context("cannot encode the stats")?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", stats.text())?;
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A queue's messages: visible, and not visible (in flight, or delayed like a requeued
/// copy). Both at zero means the queue holds nothing.
pub async fn queue_counts(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<(u64, u64)> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .map_err(|e| {
            anyhow!(
                "cannot read the queue {url}: {}",
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            )
        })?;
    let get = |name: QueueAttributeName| {
        out.attributes()
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            + get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    ))
}

/// One message read back from a dead-letter queue, with the attributes the ingest's
/// DLQ send sets.
#[derive(Debug, Clone)]
pub struct DeadLetterCopy {
    /// `source_message_id`: the refused message's own id.
    pub source: Option<String>,
    /// `reason`: the field and the rule.
    pub reason: Option<String>,
    /// The refused body, unchanged.
    pub body: String,
}

/// Receives every message of a dead-letter queue (kept invisible while reading, so each
/// is read once), until three polls come back empty.
pub async fn drain_dlq(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> anyhow::Result<Vec<DeadLetterCopy>> {
    let mut out = Vec::new();
    let mut empty = 0;
    while empty < 3 {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(3600)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(|e| anyhow!("{}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?
            .messages
            .unwrap_or_default();
        if got.is_empty() {
            empty += 1;
        }
        for m in got {
            let attr = |name: &str| {
                m.message_attributes()
                    .and_then(|a| a.get(name))
                    .and_then(|v| v.string_value())
                    .map(str::to_owned)
            };
            out.push(DeadLetterCopy {
                source: attr("source_message_id"),
                reason: attr("reason"),
                body: m.body().unwrap_or_default().to_owned(),
            });
        }
    }
    Ok(out)
}
