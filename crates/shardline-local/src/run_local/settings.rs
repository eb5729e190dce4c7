//! The runner's flags (`shardline-local run-local`) and settings, with the template's
//! event source mapping and function settings as defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail};
use clap::Args;
use shardline::env::StackArgs;

/// template.yaml `IngestBatchSize` default (the mapping's `BatchSize`).
pub const DEFAULT_BATCH_SIZE: usize = 100;
/// template.yaml `BatchingWindow` default, seconds.
pub const DEFAULT_BATCHING_WINDOW_SECS: f64 = 1.0;
/// template.yaml `SlabIngestBatchSize` default: the mapping's `BatchSize` with
/// `Slabs=on`, a batch being what fills a slab.
pub const DEFAULT_SLAB_BATCH_SIZE: usize = 1_000;
/// template.yaml `SlabBatchingWindow` default, seconds: the mapping's window with
/// `Slabs=on`.
pub const DEFAULT_SLAB_BATCHING_WINDOW_SECS: f64 = 5.0;
/// template.yaml `IngestTimeout` default, seconds.
pub const DEFAULT_FUNCTION_TIMEOUT_SECS: f64 = 30.0;
/// template.yaml `QueryTimeout` default: each local query request's deadline.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// template.yaml `IngestMaxConcurrency` default (`ScalingConfig.MaximumConcurrency`).
pub const DEFAULT_MAX_CONCURRENCY: usize = 20;

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
    /// Run the sealer every this many seconds, as its schedule does in AWS (the
    /// template's `SealerSchedule`, a minute); 0 turns it off. It runs only where the
    /// stack has a rollups table (`ROLLUP_TABLE`).
    #[arg(long, default_value_t = DEFAULT_SEAL_EVERY_SECS)]
    pub seal_every: f64,
    /// Append the id of every message received to this file, a line each (a restart
    /// appends to it), so each message the publisher had accepted can be accounted for.
    #[arg(long)]
    pub received_log: Option<PathBuf>,
}

/// Seconds between two runs of the sealer by default: the template's schedule.
pub const DEFAULT_SEAL_EVERY_SECS: f64 = 60.0;

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
    /// Time between two runs of the sealer, or none.
    pub seal_every: Option<Duration>,
    /// The file each received message's id is appended to, or none.
    pub received_log: Option<PathBuf>,
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
            seal_every: Some(Duration::from_secs_f64(DEFAULT_SEAL_EVERY_SECS)),
            received_log: None,
        }
    }

    pub(super) fn from_args(args: &RunLocalArgs, queue_url: String) -> anyhow::Result<Self> {
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
            seal_every: Some(secs("seal-every", args.seal_every)?).filter(|d| !d.is_zero()),
            received_log: args.received_log.clone(),
        })
    }
}
