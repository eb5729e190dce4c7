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
//! - The sealer runs every `--seal-every` seconds, as its schedule runs it in AWS,
//!   where the stack has a rollups table.
//! - [`Running::stop`] (SIGTERM/Ctrl-C in the binary) stops polling; batches already
//!   received are finished and deleted before the runner ends.
//!
//! [`start`] reads as the steps of a start; the modules hold them:
//! - `settings`: the flags, the settings, the template's defaults;
//! - `queues`: the queue's ARN and counts, the DLQ's messages, the runner's SenderId;
//! - `query_server`: the query API on loopback;
//! - `worker`: the pollers that gather batches, and the idle watch;
//! - `invoke`: one invocation of the handler, and the deletes after it;
//! - `received`: the log of every message id received (`--received-log`);
//! - `stats`: the counters; `running`: the handle [`start`] returns.

mod invoke;
mod query_server;
mod queues;
mod received;
mod running;
mod seal;
mod settings;
mod stats;
mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use parking_lot::Mutex;

use anyhow::Context as _;
use ingest::{Ingest, SqsQueue};
use query::QueryService;
use shardline::env::EnvLookup;
use store::dynamo::{DynamoShards, DynamoTable};
use store::read::DynamoReadingSource;
use store::rollup::dynamo::DynamoRollups;
use tokio::sync::watch;
use tokio::time::Instant;

pub use invoke::sqs_event;
pub use queues::{DeadLetterCopy, drain_dlq, queue_counts};
pub use received::read_received;
pub use running::Running;
pub use settings::{
    DEFAULT_BATCH_SIZE, DEFAULT_BATCHING_WINDOW_SECS, DEFAULT_FUNCTION_TIMEOUT_SECS,
    DEFAULT_MAX_CONCURRENCY, DEFAULT_SEAL_EVERY_SECS, DEFAULT_SLAB_BATCH_SIZE,
    DEFAULT_SLAB_BATCHING_WINDOW_SECS, QUERY_TIMEOUT, RunLocalArgs, Settings,
};
pub(crate) use stats::ms;
pub use stats::{Billed, Stats};

use worker::Shared;

type Service = Ingest<DynamoTable, DynamoShards, SqsQueue, DynamoRollups>;
type Query = QueryService<DynamoReadingSource, DynamoShards>;

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
        crate::signal::stop_requested().await;
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

/// Starts the runner: configuration from `env` (the same variables as the Lambdas),
/// clients for `endpoint` (or `AWS_ENDPOINT_URL`), workers, and the query API.
pub async fn start(
    settings: Settings,
    env: &EnvLookup,
    endpoint: Option<&str>,
) -> anyhow::Result<Running> {
    let mut ingest_config = ingest_config(env, &settings)?;
    let sdk = env.sdk_config(endpoint).await;
    let region = sdk
        .region()
        .map(ToString::to_string)
        .unwrap_or_else(|| shardline::env::DEFAULT_REGION.to_owned());
    let sqs = sqs_client(env, &sdk);
    // A message's shardline.* attributes count only when SQS names the ingest as its
    // sender. Locally the stand-in gives every sender one SenderId, so the runner's own
    // sends (its requeued copies) are told by what SQS reports for it.
    if ingest_config.sender_id.is_none() {
        ingest_config.sender_id = queues::own_sender_id(&sqs).await;
    }
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let ingest = Arc::new(Ingest::from_clients(ingest_config, &dynamo, &sqs));
    let queue_arn = queues::queue_arn(&sqs, &settings.queue_url).await?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let stats = Arc::new(Mutex::new(Stats::default()));
    let (query_addr, server) = match settings.query_listen {
        Some(addr) => {
            let (addr, server) =
                query_server::listen(addr, env, &dynamo, stop_rx.clone(), stats.clone()).await?;
            (Some(addr), Some(server))
        }
        None => (None, None),
    };

    if let Some(every) = settings.seal_every {
        seal::spawn(env, &dynamo, every, stop_rx.clone(), stats.clone())?;
    }

    let received = settings
        .received_log
        .as_deref()
        .map(received::ReceivedLog::open)
        .transpose()?;
    let shared = Arc::new(Shared {
        received,
        settings,
        sqs,
        ingest,
        queue_arn,
        region,
        stats: stats.clone(),
        last_activity: Mutex::new(Instant::now()),
        in_flight: AtomicUsize::new(0),
    });
    let task = worker::spawn_all(shared, (stop_tx.clone(), stop_rx), server);
    Ok(Running {
        query_addr,
        stop: stop_tx,
        stats,
        task,
    })
}

/// The ingest's configuration from `env`, completed by what this runner knows: the
/// queue it polls and how it gathers batches.
fn ingest_config(env: &EnvLookup, settings: &Settings) -> anyhow::Result<ingest::Config> {
    let mut config =
        ingest::Config::from_lookup(|name| env.get(name)).context("ingest configuration")?;
    // The queue this runner polls is the one whose redeliveries the handler delays.
    config
        .source_queue_url
        .get_or_insert_with(|| settings.queue_url.clone());
    // The handler measures arrival rates by how this runner gathers its batches.
    config.intake = ingest::config::Intake {
        batch_size: settings.batch_size,
        window: settings.batching_window,
    };
    Ok(config)
}

/// The SQS client. AWS_ENDPOINT_URL_SQS, the SDK's name for a service's own endpoint,
/// puts the queues on another server than the tables (the demo: moto for SQS,
/// dynalite for DynamoDB).
fn sqs_client(env: &EnvLookup, sdk: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
    match env.get("AWS_ENDPOINT_URL_SQS") {
        Some(url) => aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(sdk)
                .endpoint_url(url)
                .build(),
        ),
        None => aws_sdk_sqs::Client::new(sdk),
    }
}
