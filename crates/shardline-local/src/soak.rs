//! `shardline-local soak`: the whole pipeline under faults and crashes, checked against the
//! publisher's manifest (docs/reliability.md scenarios 14 and 16, and the query API under load).
//!
//! A private moto, `capacity-proxy` in front of it (unprocessed items, HTTP 500s,
//! latency, a per-key write cap so hot devices throttle), `shardline-local run-local` as a
//! child process that is SIGKILLed at seeded moments and restarted, the publisher, and a
//! reader paging the query API. Afterwards the table must hold exactly the valid
//! readings (no duplicate, none missing) and the DLQ exactly the malformed messages,
//! each with its reason. [`run`] returns a [`Report`]; its `violations` list what broke.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::QueueAttributeName;
use capacity_proxy::{Faults, Proxy, ProxyConfig, StatsSnapshot};
use clap::Args;
use indicatif::ProgressBar;
use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tokio::process::{Child, Command};

use crate::publish::{self, Manifest, Plan, ReadingId, SendOptions};
use crate::run_local::{self, DeadLetterCopy};

/// Flags of `shardline-local soak`.
#[derive(Debug, Clone, Args)]
pub struct SoakArgs {
    /// Messages to publish (2% malformed).
    #[arg(long, default_value_t = 10_000)]
    pub messages: u64,
    /// Times run-local is SIGKILLed (and restarted) while messages are in flight.
    #[arg(long, default_value_t = 3)]
    pub kills: u32,
    /// Seed of the publisher, the kill moments, the proxy's faults and the reader.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Longest wait for the queue to drain after publishing, seconds.
    #[arg(long, default_value_t = 900)]
    pub drain_timeout: u64,
    /// Write capacity per partition key at the proxy, WCU/s (below the hot devices'
    /// rates, their writes throttle and their fan-out grows).
    #[arg(long, default_value_t = SoakConfig::KEY_WCU)]
    pub key_wcu: f64,
}

/// What one soak does.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The repository root (template.yaml, `.local/`).
    pub root: PathBuf,
    /// The `shardline` binary run as the `run-local` child.
    pub shardline_bin: PathBuf,
    /// Messages to publish.
    pub messages: u64,
    /// SIGKILLs of run-local.
    pub kills: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Faults the proxy injects into DynamoDB calls.
    pub faults: Faults,
    /// Write capacity per partition key at the proxy (hot devices exceed it).
    pub key_wcu: f64,
    /// Messages per second the fleet publishes, on top of `hot_rate`.
    pub fleet_rate: f64,
    /// Messages per second of the named hot device.
    pub hot_rate: f64,
    /// Visibility timeout set on the soak's queue, seconds (short, so redeliveries after
    /// a kill come back within the run).
    pub visibility_timeout_secs: u32,
    /// The ingest handler's deadline in the child, seconds.
    pub function_timeout_secs: f64,
    /// Concurrent invocations in the child.
    pub max_concurrency: usize,
    /// Longest wait for the queue to drain.
    pub drain_timeout: Duration,
    /// The publisher holds off while the queue holds this many messages (moto's SQS
    /// costs grow with the queue's length on every call).
    pub max_queued: u64,
    /// Progress lines on stderr.
    pub verbose: bool,
}

impl SoakConfig {
    /// The proxy's per-key write capacity. The publisher's achieved rate is bounded by
    /// moto's SQS (tens of messages per second, the hot device a few readings/s), so the
    /// limit is scaled down with it: at 4 WCU/s the hot devices' keys throttle (thousands
    /// of key-range throttles in a 2,000-message run) and their fan-out grows, as a
    /// device past 1,000 WCU/s would in AWS. `--key-wcu 200` runs without throttles.
    pub const KEY_WCU: f64 = 4.0;

    /// The soak: 30% unprocessed, 5% HTTP 500, 10 ms latency.
    pub fn new(
        root: PathBuf,
        shardline_bin: PathBuf,
        messages: u64,
        kills: u32,
        seed: u64,
    ) -> Self {
        Self {
            root,
            shardline_bin,
            messages,
            kills,
            seed,
            faults: Faults {
                latency_ms: 10,
                unprocessed_rate: 0.30,
                error_rate: 0.05,
                ..Faults::default()
            },
            key_wcu: Self::KEY_WCU,
            fleet_rate: 200.0,
            hot_rate: 100.0,
            // Above the handler's deadline, so a live invocation's messages are not
            // handed out twice; short, so a killed runner's batches come back soon.
            visibility_timeout_secs: 12,
            function_timeout_secs: 10.0,
            max_concurrency: 6,
            drain_timeout: Duration::from_secs(900),
            // Above what the workers hold (6 x 10), low enough that moto stays fast.
            max_queued: 60,
            verbose: false,
        }
    }
}

/// The hot device the publisher drives on its own schedule.
pub const HOT_DEVICE: &str = "hot-device-001";

/// What the reader saw while the soak ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReaderStats {
    /// Ranges paged through to the end.
    pub ranges: u64,
    /// Pages read (200s).
    pub pages: u64,
    /// Readings returned.
    pub items: u64,
    /// Requests that got no answer (run-local killed or restarting); retried.
    pub connection_errors: u64,
    /// 5xx answers (injected DynamoDB faults surfacing); retried.
    pub server_errors: u64,
    /// 4xx answers to requests the reader built valid (violations).
    pub client_errors: u64,
}

/// The outcome of a soak.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub messages_sent: u64,
    pub valid_messages: u64,
    pub readings_sent: u64,
    pub malformed_sent: u64,
    pub send_failures: u64,
    /// Items in the table, and distinct (device, event) among them.
    pub table_items: u64,
    pub table_distinct: u64,
    /// Readings stored more than once, and the copies beyond each one's first.
    pub stored_again: u64,
    pub extra_copies: u64,
    pub missing: u64,
    pub unexpected: u64,
    /// DLQ messages, those naming a malformed message, and those with a reason.
    pub dlq_messages: u64,
    pub dlq_malformed: u64,
    pub dlq_with_reason: u64,
    /// DLQ messages repeating a source_message_id already there (crash between the
    /// handler's DLQ send and the delete).
    pub dlq_repeated_copies: u64,
    /// SIGKILLs delivered and run-local starts.
    pub kills: u32,
    pub starts: u32,
    /// Fan-out changes recorded in the shard table.
    pub fanout_raises: u64,
    /// Entities with a fan-out above 1.
    pub fanned_out_entities: u64,
    /// The proxy's counters (all runs of run-local together).
    pub proxy_requests: BTreeMap<String, u64>,
    pub proxy_unprocessed_items: u64,
    pub proxy_errors: u64,
    pub proxy_throttled: BTreeMap<String, u64>,
    /// The last run-local's own counters (killed runs lose theirs), JSON.
    pub last_run_local: Option<serde_json::Value>,
    pub reader: ReaderStats,
    /// Hot device: readings in the table and in the final paged read.
    pub hot_device_table: u64,
    pub hot_device_read: u64,
    pub publish_secs: f64,
    pub drain_secs: f64,
    pub duration_secs: f64,
    /// Every broken promise, described; empty = the soak passed.
    pub violations: Vec<String>,
}

impl Report {
    /// The human summary.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!(
            "sent: {} messages ({} valid with {} readings, {} malformed), {} send failures",
            self.messages_sent,
            self.valid_messages,
            self.readings_sent,
            self.malformed_sent,
            self.send_failures
        ));
        line(format!(
            "table: {} items, {} distinct readings, {} stored more than once ({} extra copies, one sort key each), {} missing, {} unexpected",
            self.table_items,
            self.table_distinct,
            self.stored_again,
            self.extra_copies,
            self.missing,
            self.unexpected
        ));
        line(format!(
            "dlq: {} messages, {} of them malformed messages sent, {} with a reason, {} repeated copies",
            self.dlq_messages, self.dlq_malformed, self.dlq_with_reason, self.dlq_repeated_copies
        ));
        line(format!(
            "crashes: {} SIGKILLs, {} starts of run-local",
            self.kills, self.starts
        ));
        line(format!(
            "faults injected by the proxy: {} unprocessed items, {} HTTP 500s; throttled {:?}",
            self.proxy_unprocessed_items, self.proxy_errors, self.proxy_throttled
        ));
        line(format!("proxy requests: {:?}", self.proxy_requests));
        if let Some(stats) = &self.last_run_local {
            line(format!(
                "last run-local: write calls {}, retries {}, unprocessed {}, fan-out raises {}, messages {} (reported {}, requeued {})",
                stats["write_calls"],
                stats["write_retries"],
                stats["unprocessed_items"],
                stats["fanout_raises"],
                stats["messages"],
                stats["failures_reported"],
                stats["requeued"]
            ));
        }
        line(format!(
            "fan-out raises (shard table): {} over {} entities",
            self.fanout_raises, self.fanned_out_entities
        ));
        line(format!(
            "reader: {} ranges, {} pages, {} items; {} connection errors, {} 5xx, {} 4xx",
            self.reader.ranges,
            self.reader.pages,
            self.reader.items,
            self.reader.connection_errors,
            self.reader.server_errors,
            self.reader.client_errors
        ));
        line(format!(
            "hot device {HOT_DEVICE}: {} in the table, {} read back through the API",
            self.hot_device_table, self.hot_device_read
        ));
        line(format!(
            "duration: {:.1} s (publish {:.1} s, drain {:.1} s)",
            self.duration_secs, self.publish_secs, self.drain_secs
        ));
        if self.violations.is_empty() {
            line("result: PASS".to_owned());
        } else {
            line(format!(
                "result: FAIL ({} violations)",
                self.violations.len()
            ));
            for v in self.violations.iter().take(20) {
                line(format!("  - {v}"));
            }
        }
        s
    }
}

/// The command: the soak with the current executable as run-local.
pub async fn run_command(args: &SoakArgs) -> anyhow::Result<()> {
    let root = std::env::current_dir().context("no current directory")?;
    let root = find_root(&root)?;
    let bin = std::env::current_exe().context("cannot locate the shardline binary")?;
    let mut config = SoakConfig::new(root, bin, args.messages, args.kills, args.seed);
    config.drain_timeout = Duration::from_secs(args.drain_timeout);
    config.key_wcu = args.key_wcu;
    config.verbose = true;
    let report = run(&config).await?;
    println!("{}", report.text());
    if !report.violations.is_empty() {
        bail!("the soak found {} violations", report.violations.len());
    }
    Ok(())
}

fn find_root(start: &Path) -> anyhow::Result<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join("template.yaml").is_file())
        .map(Path::to_path_buf)
        .with_context(|| format!("no template.yaml in {} or above", start.display()))
}

/// When the soak's first progress line was printed (its lines carry seconds since).
static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

macro_rules! say {
    ($cfg:expr, $($arg:tt)*) => {
        if $cfg.verbose {
            eprintln!("soak {:>7.1}: {}", T0.get_or_init(Instant::now).elapsed().as_secs_f64(), format!($($arg)*));
        }
    };
}

/// Runs the soak. Errors are failures to run it at all; broken promises are in the
/// report's `violations`.
pub async fn run(cfg: &SoakConfig) -> anyhow::Result<Report> {
    let started = Instant::now();
    let prefix = format!("soak-{}-{}", std::process::id(), cfg.seed);
    let Services {
        moto,
        stack,
        sqs,
        dynamo,
        proxy,
    } = Services::start(cfg, &prefix).await?;

    let dir = cfg.root.join(".local/soak");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let env_file = dir.join(format!("{prefix}.env"));
    let query_port = stand_in::free_loopback_port()?;
    write_child_env(&stack, &proxy.url(), cfg.seed, &env_file)?;
    let child_spec = ChildSpec {
        bin: cfg.shardline_bin.clone(),
        env_file: env_file.clone(),
        query: SocketAddr::from(([127, 0, 0, 1], query_port)),
        function_timeout: cfg.function_timeout_secs,
        max_concurrency: cfg.max_concurrency,
        log_dir: dir.clone(),
        prefix: prefix.clone(),
    };

    let mut report = Report::default();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_50a4);
    let mut child = child_spec.start(report.starts).await?;
    report.starts += 1;

    // The reader pages the API while everything else runs.
    let stop_reader = Arc::new(AtomicBool::new(false));
    let publish_start = store::clock::wall_clock()?;
    let reader = tokio::spawn(reader_loop(
        format!("http://{}", child_spec.query),
        publish_start.as_millis(),
        cfg.seed,
        stop_reader.clone(),
    ));

    // Publishing runs beside the kills.
    let manifest_path = dir.join(format!("{prefix}.manifest.jsonl"));
    let plan = soak_plan(cfg);
    let publisher = tokio::spawn(publish_to(
        sqs.clone(),
        stack.queue_url.clone(),
        plan,
        publish_start,
        cfg.max_queued,
        manifest_path.clone(),
    ));
    // Queue depth while publishing, for the progress lines.
    let monitor = tokio::spawn(watch_queue(
        sqs.clone(),
        stack.queue_url.clone(),
        cfg.verbose,
    ));
    // Kills at seeded moments, each after the restarted runner had time to take
    // batches in hand.
    for k in 0..cfg.kills {
        let wait = Duration::from_millis(rng.random_range(2_000..6_000));
        tokio::time::sleep(wait).await;
        say!(cfg, "SIGKILL {} of run-local (pid {:?})", k + 1, child.id());
        child.start_kill().context("killing run-local")?;
        let _ = child.wait().await;
        report.kills += 1;
        child = child_spec.start(report.starts).await?;
        report.starts += 1;
    }

    let (summary, publish_elapsed) = publisher.await.context("the publisher task")??;
    monitor.abort();
    report.publish_secs = publish_elapsed.as_secs_f64();
    say!(cfg, "published: {}", summary.text());
    report.record_sent(&summary);

    let drain_start = Instant::now();
    let drained = drain(cfg, &sqs, &stack.queue_url, &mut child, &dir, &mut report).await?;
    report.drain_secs = drain_start.elapsed().as_secs_f64();
    stop_reader.store(true, Ordering::SeqCst);
    let (reader_stats, seen, reader_violations) = reader.await.context("the reader task")?;
    report.reader = reader_stats;
    report.violations.extend(reader_violations);

    // The final, complete read of the hot device while run-local still serves.
    let manifest = Manifest::read(&manifest_path)?;
    let expected_hot: Vec<&ReadingId> = manifest
        .readings
        .iter()
        .filter(|r| r.device_id == HOT_DEVICE)
        .collect();

    let (table, counts) = scan_readings(&dynamo, &stack.table_name).await?;
    let hot_in_table: BTreeSet<(i64, String)> = table
        .iter()
        .filter(|r| r.device_id == HOT_DEVICE)
        .map(|r| (r.ts_ms, r.event_id.clone()))
        .collect();
    report.hot_device_table = hot_in_table.len() as u64;
    let base = format!("http://{}", child_spec.query);
    check_hot_device_read(&mut report, &base, &expected_hot, &hot_in_table, drained).await;

    // Stop the last run-local gracefully to get its counters.
    report.last_run_local = child_spec.stop(child, report.starts - 1).await;
    report.record_proxy(&proxy.stats());

    check_table(&mut report, &manifest, &table, &counts, &seen);

    let dlq = run_local::drain_dlq(&sqs, &stack.dlq_url).await?;
    check_dlq(&mut report, &manifest, &dlq);

    let (raises, entities) = fanout_raises(&dynamo, &stack.shard_table_name).await?;
    report.fanout_raises = raises;
    report.fanned_out_entities = entities;
    report.duration_secs = started.elapsed().as_secs_f64();
    // Files of a passing soak are not needed; a failing one keeps its logs and manifest.
    if report.violations.is_empty() {
        let _ = std::fs::remove_file(&manifest_path);
        let _ = std::fs::remove_file(&env_file);
        for n in 0..report.starts {
            let _ = std::fs::remove_file(child_spec.log(n));
            let _ = std::fs::remove_file(child_spec.stdout(n));
        }
    }
    proxy.shutdown().await?;
    drop(moto);
    Ok(report)
}

/// The soak's private services: moto with the template's stack, and capacity-proxy in
/// front of it with the soak's faults.
struct Services {
    moto: stand_in::Moto,
    stack: stand_in::Stack,
    sqs: aws_sdk_sqs::Client,
    dynamo: aws_sdk_dynamodb::Client,
    proxy: capacity_proxy::ProxyHandle,
}

impl Services {
    async fn start(cfg: &SoakConfig, prefix: &str) -> anyhow::Result<Self> {
        let root = cfg.root.clone();
        let moto = tokio::task::spawn_blocking(move || -> anyhow::Result<stand_in::Moto> {
            let venv = stand_in::ensure_venv(&root)?;
            stand_in::Moto::start(&venv)
        })
        .await
        .context("moto start task")??;
        let stack = stand_in::provision(&moto.endpoint(), &cfg.root.join("template.yaml"), prefix)
            .await
            .context("provisioning the soak stack")?;
        let sdk = stand_in::sdk_config(&moto.endpoint()).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
        // A short visibility timeout so messages held by a killed run-local come back
        // within the soak (the template's 185 s suits a 30 s Lambda, not a soak).
        sqs.set_queue_attributes()
            .queue_url(&stack.queue_url)
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                cfg.visibility_timeout_secs.to_string(),
            )
            .send()
            .await
            .context("setting the soak queue's visibility timeout")?;

        let mut proxy_config = ProxyConfig::forward(&moto.endpoint())?;
        proxy_config.faults = cfg.faults;
        proxy_config.seed = Some(cfg.seed);
        proxy_config.limits.key_wcu = cfg.key_wcu;
        let proxy = Proxy::start(proxy_config).await?;
        say!(
            cfg,
            "moto {}, capacity-proxy {}",
            moto.endpoint(),
            proxy.url()
        );
        Ok(Self {
            moto,
            stack,
            sqs,
            dynamo,
            proxy,
        })
    }
}

/// Publishes `plan` to `queue_url` from `start` on, keeping at most `max_queued`
/// messages queued, and writes the manifest of what was sent to `manifest`; returns
/// the summary and how long it took.
async fn publish_to(
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    plan: Plan,
    start: sharding::time::Timestamp,
    max_queued: u64,
    manifest: PathBuf,
) -> anyhow::Result<(publish::Summary, Duration)> {
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&manifest)
            .with_context(|| format!("creating {}", manifest.display()))?,
    );
    let t = Instant::now();
    let summary = publish::publish(
        &sqs,
        &queue_url,
        plan,
        start,
        SendOptions {
            max_queued: Some(max_queued),
            ..SendOptions::default()
        },
        &ProgressBar::hidden(),
        Some(&mut file),
    )
    .await?;
    std::io::Write::flush(&mut file).context("writing the manifest")?;
    Ok((summary, t.elapsed()))
}

/// Prints the queue's depth every 5 s (when `verbose`), until aborted.
async fn watch_queue(sqs: aws_sdk_sqs::Client, queue_url: String, verbose: bool) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if let (true, Ok((visible, hidden))) =
            (verbose, run_local::queue_counts(&sqs, &queue_url).await)
        {
            eprintln!(
                "soak {:>7.1}: publishing; queue {visible} visible, {hidden} in flight",
                T0.get_or_init(Instant::now).elapsed().as_secs_f64()
            );
        }
    }
}

impl Report {
    /// What the publisher sent; a message SQS did not accept is a violation.
    fn record_sent(&mut self, summary: &publish::Summary) {
        self.messages_sent = summary.sent.messages;
        self.valid_messages = summary.sent.valid_messages;
        self.readings_sent = summary.sent.readings;
        self.malformed_sent = summary.sent.malformed_total();
        self.send_failures = summary.send_failures;
        if summary.send_failures > 0 {
            self.violations.push(format!(
                "{} messages were not accepted by SQS",
                summary.send_failures
            ));
        }
    }

    /// What the proxy counted.
    fn record_proxy(&mut self, stats: &StatsSnapshot) {
        self.proxy_requests = stats.requests_by_op.clone();
        self.proxy_unprocessed_items = stats.faults.unprocessed_items;
        self.proxy_errors = stats.faults.error;
        self.proxy_throttled = stats.throttled_by_reason.clone();
    }
}

/// Writes the run-local child's env file: the stack through the proxy, a fixed cursor
/// key, and the fan-out's and redelivery's time scales shrunk to the soak's minutes.
fn write_child_env(
    stack: &stand_in::Stack,
    proxy_url: &str,
    seed: u64,
    env_file: &Path,
) -> anyhow::Result<()> {
    let cursor_key = hex::encode(ChaCha8Rng::seed_from_u64(seed).random::<[u8; 32]>());
    stack.write_env_with(
        env_file,
        &[
            ("AWS_ENDPOINT_URL".to_owned(), proxy_url.to_owned()),
            // Fixed, so cursors stay valid across restarts of run-local.
            ("CURSOR_KEY".to_owned(), cursor_key),
            // The fan-out's time scale shrunk to the soak's minutes, as in the demo:
            // a hot device may double its shards every few seconds rather than every
            // ten minutes (the cooldown must cover the propagation margin, so the
            // caches and the future skew shrink with it).
            ("MAX_FUTURE_SECS".to_owned(), "2".to_owned()),
            ("CACHE_TTL_SECS".to_owned(), "2".to_owned()),
            ("PROPAGATION_SLACK_SECS".to_owned(), "1".to_owned()),
            ("FANOUT_COOLDOWN_SECS".to_owned(), "5".to_owned()),
            ("FANOUT_JITTER_SECS".to_owned(), "1".to_owned()),
            // Redelivery waits on the same scale: 5, 10, 20, 40 s at most before
            // receives 2 to 5, so a throttled message lives about a minute before the
            // redrive could take it (30 s, 60 s, ... in production).
            ("REDELIVERY_BASE_SECS".to_owned(), "5".to_owned()),
            ("REDELIVERY_CAP_SECS".to_owned(), "40".to_owned()),
        ],
    )
}

/// Waits until both counts of the source queue are zero several polls in a row (moto
/// moves a message to the DLQ when it is received once too often; a requeued copy
/// counts while it is delayed), at most `cfg.drain_timeout`; returns whether it
/// drained. A run-local that exits on its own fails the soak.
async fn drain(
    cfg: &SoakConfig,
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    child: &mut Child,
    dir: &Path,
    report: &mut Report,
) -> anyhow::Result<bool> {
    let drain_start = Instant::now();
    let mut quiet = 0;
    loop {
        let (visible, hidden) = run_local::queue_counts(sqs, queue_url).await?;
        if visible == 0 && hidden == 0 {
            quiet += 1;
            if quiet >= 3 {
                return Ok(true);
            }
        } else {
            quiet = 0;
        }
        if drain_start.elapsed() > cfg.drain_timeout {
            report.violations.push(format!(
                "the queue did not drain within {:?}: {visible} visible, {hidden} in flight",
                cfg.drain_timeout
            ));
            return Ok(false);
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "run-local exited on its own ({status}); log in {}",
                dir.display()
            );
        }
        say!(
            cfg,
            "draining: {visible} visible, {hidden} in flight or delayed"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The final, complete paged read of the hot device through the API at `base`, held
/// to the table scan made just before it.
async fn check_hot_device_read(
    report: &mut Report,
    base: &str,
    expected_hot: &[&ReadingId],
    hot_in_table: &BTreeSet<(i64, String)>,
    drained: bool,
) {
    if let (Some(from), Some(to)) = (
        expected_hot.iter().map(|r| r.ts_ms).min(),
        expected_hot.iter().map(|r| r.ts_ms).max(),
    ) {
        match read_all(base, HOT_DEVICE, from - 1_000, to + 1_000, 500).await {
            Ok(read) => {
                report.hot_device_read = read.len() as u64;
                let read: Vec<(i64, String)> = read.into_iter().collect();
                let want: Vec<(i64, String)> = hot_in_table.iter().cloned().collect();
                if read != want {
                    // The scan came first: while the queue still held messages, the
                    // read can legitimately hold more than the scan.
                    let scanned: BTreeSet<&(i64, String)> = want.iter().collect();
                    let got: BTreeSet<&(i64, String)> = read.iter().collect();
                    let only_api: Vec<_> = got.difference(&scanned).take(3).collect();
                    let only_table: Vec<_> = scanned.difference(&got).take(3).collect();
                    report.violations.push(format!(
                        "the paged read of {HOT_DEVICE} ({} readings) differs from the table scan before it ({}); only in the read: {only_api:?}; only in the table: {only_table:?}{}",
                        read.len(),
                        want.len(),
                        if drained { "" } else { " (the queue had not drained)" }
                    ));
                }
            }
            Err(e) => report.violations.push(format!(
                "the final paged read of {HOT_DEVICE} failed: {e:#}"
            )),
        }
    } else {
        report
            .violations
            .push(format!("the plan sent no reading of {HOT_DEVICE}"));
    }
}

/// The table against the manifest: every valid reading stored, under one sort key,
/// nothing stored that was not sent, and nothing shown to the reader that is not
/// stored.
fn check_table(
    report: &mut Report,
    manifest: &Manifest,
    table: &BTreeSet<ReadingId>,
    counts: &HashMap<(String, String), Vec<String>>,
    seen: &BTreeSet<(String, String)>,
) {
    report.table_items = counts.values().map(|sks| sks.len() as u64).sum();
    report.table_distinct = counts.len() as u64;
    // A reading re-keyed after a raise (a crash between its write and the delete, then a
    // redelivery) is stored again by design, once per such crash: a message in flight at
    // two kills can be stored three times; reads answer it once by its sort key. Copies under
    // different sort keys would be two readings to a reader: that is a violation.
    let copies = || {
        counts
            .values()
            .map(|sks| sks.len() as u64)
            .filter(|&n| n > 1)
    };
    report.stored_again = copies().count() as u64;
    report.extra_copies = copies().map(|n| n - 1).sum();
    let split: Vec<_> = counts
        .iter()
        .filter(|(_, sks)| sks.iter().collect::<BTreeSet<_>>().len() > 1)
        .collect();
    let missing: Vec<&ReadingId> = manifest.readings.difference(table).collect();
    let unexpected: Vec<&ReadingId> = table.difference(&manifest.readings).collect();
    report.missing = missing.len() as u64;
    report.unexpected = unexpected.len() as u64;
    if let Some((key, sks)) = split.first() {
        report.violations.push(format!(
            "{} readings stored under different sort keys, e.g. {key:?} as {sks:?}",
            split.len()
        ));
    }
    if !missing.is_empty() {
        report.violations.push(format!(
            "{} valid readings missing from the table, e.g. {:?}",
            missing.len(),
            missing[0]
        ));
    }
    if !unexpected.is_empty() {
        report.violations.push(format!(
            "{} readings in the table that were not sent, e.g. {:?}",
            unexpected.len(),
            unexpected[0]
        ));
    }
    if report.table_distinct != manifest.readings.len() as u64 {
        report.violations.push(format!(
            "{} distinct readings stored, {} valid readings sent",
            report.table_distinct,
            manifest.readings.len()
        ));
    }
    // Everything the reader was shown during the soak is a reading that was sent.
    let strays: Vec<&(String, String)> = seen
        .iter()
        .filter(|key| !counts.contains_key(*key))
        .collect();
    if !strays.is_empty() {
        report.violations.push(format!(
            "the reader was shown {} readings the table does not hold, e.g. {:?}",
            strays.len(),
            strays[0]
        ));
    }
}

/// The DLQ against the manifest: every malformed message there, with its reason, and
/// nothing else.
fn check_dlq(report: &mut Report, manifest: &Manifest, dlq: &[DeadLetterCopy]) {
    report.dlq_messages = dlq.len() as u64;
    let mut sources: BTreeMap<String, u64> = BTreeMap::new();
    for letter in dlq {
        match &letter.source {
            Some(id) => *sources.entry(id.clone()).or_default() += 1,
            None => report.violations.push(format!(
                "a DLQ message without source_message_id (redriven?): {}",
                truncate(&letter.body, 200)
            )),
        }
        if letter.reason.as_deref().is_some_and(|r| !r.is_empty()) {
            report.dlq_with_reason += 1;
        } else {
            report.violations.push(format!(
                "a DLQ message without a reason: {:?}",
                letter.source
            ));
        }
    }
    report.dlq_malformed = sources
        .keys()
        .filter(|id| manifest.malformed.contains_key(*id))
        .count() as u64;
    // The handler sends a refused message to the DLQ and the runner deletes it
    // afterwards; a SIGKILL (or a timed-out DLQ send that did arrive) between the two
    // redelivers it and it is sent again. Standard SQS cannot deduplicate that, so a
    // second copy with the same source_message_id is counted, not a broken promise.
    report.dlq_repeated_copies = sources.values().map(|n| n - 1).sum();
    for id in sources.keys() {
        if !manifest.malformed.contains_key(id) {
            report.violations.push(format!(
                "message {id} in the DLQ was not a malformed message"
            ));
        }
    }
    for id in manifest.malformed.keys() {
        if !sources.contains_key(id) {
            report
                .violations
                .push(format!("malformed message {id} is not in the DLQ"));
        }
    }
}

/// The publisher's plan: about `messages` messages, 2% malformed, a Zipf fleet (its
/// top devices are hot) and one hot device on its own schedule.
pub fn soak_plan(cfg: &SoakConfig) -> Plan {
    let rate = cfg.fleet_rate + cfg.hot_rate;
    let secs = (cfg.messages as f64 / rate).max(0.1);
    Plan {
        devices: 50,
        rate: cfg.fleet_rate,
        // A little long, so max_messages is what cuts the stream.
        duration: Duration::from_secs_f64(secs * 1.05 + 0.1),
        hot_device: Some(HOT_DEVICE.to_owned()),
        hot_rate: cfg.hot_rate,
        jitter: Duration::from_millis(50),
        batch: 1,
        bad_rate: 0.02,
        seed: cfg.seed,
        max_messages: Some(cfg.messages),
        zipf_exponent: 1.2,
    }
}

/// How to start run-local as a child.
#[derive(Debug, Clone)]
struct ChildSpec {
    bin: PathBuf,
    env_file: PathBuf,
    query: SocketAddr,
    function_timeout: f64,
    max_concurrency: usize,
    log_dir: PathBuf,
    prefix: String,
}

impl ChildSpec {
    fn log(&self, n: u32) -> PathBuf {
        self.log_dir
            .join(format!("{}.run-local-{n}.log", self.prefix))
    }

    fn stdout(&self, n: u32) -> PathBuf {
        self.log_dir
            .join(format!("{}.run-local-{n}.out", self.prefix))
    }

    /// Starts run-local number `n` and waits until its query port answers.
    async fn start(&self, n: u32) -> anyhow::Result<Child> {
        let log = std::fs::File::create(self.log(n))?;
        let out = std::fs::File::create(self.stdout(n))?;
        let mut child = Command::new(&self.bin)
            .arg("run-local")
            .arg("--env-file")
            .arg(&self.env_file)
            .args(["--batch-size", "10", "--batching-window", "0.5"])
            .args(["--max-concurrency", &self.max_concurrency.to_string()])
            .args(["--function-timeout", &self.function_timeout.to_string()])
            .args(["--query-listen", &self.query.to_string(), "--json"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "run-local exited with {status} at start: {}",
                    std::fs::read_to_string(self.log(n)).unwrap_or_default()
                );
            }
            if tokio::net::TcpStream::connect(self.query).await.is_ok() {
                return Ok(child);
            }
            if Instant::now() > deadline {
                bail!("run-local did not listen on {} within 60 s", self.query);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, wait, and its JSON stats (None when it printed none).
    async fn stop(&self, mut child: Child, n: u32) -> Option<serde_json::Value> {
        if let Some(pid) = child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        let _ = child.start_kill();
        let _ = child.wait().await;
        // stdout: the address line, then the stats as one JSON object.
        let text = std::fs::read_to_string(self.stdout(n)).ok()?;
        let (_, json) = text.split_once('\n')?;
        serde_json::from_str(json).ok()
    }
}

/// Every reading item of the table, and how many items each (device, event) has.
async fn scan_readings(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
) -> anyhow::Result<(BTreeSet<ReadingId>, HashMap<(String, String), Vec<String>>)> {
    let mut set = BTreeSet::new();
    // Per reading, the sort key of each stored copy.
    let mut counts: HashMap<(String, String), Vec<String>> = HashMap::new();
    for item in store::read::scan_items(dynamo.scan().table_name(table)).await? {
        let item = store::ReadingItem::from_item(item)?;
        counts
            .entry((item.device_id.clone(), item.event_id.clone()))
            .or_default()
            .push(item.sk.clone());
        set.insert(ReadingId {
            device_id: item.device_id,
            event_id: item.event_id,
            ts_ms: item.ts_ms,
        });
    }
    Ok((set, counts))
}

/// Fan-out changes in the shard table (entries of every `shard_history`) and the
/// entities having any.
async fn fanout_raises(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
) -> anyhow::Result<(u64, u64)> {
    let (mut raises, mut entities) = (0, 0);
    for item in store::read::scan_items(dynamo.scan().table_name(table)).await? {
        if let Some(AttributeValue::L(history)) = item.get("shard_history")
            && !history.is_empty()
        {
            raises += history.len() as u64;
            entities += 1;
        }
    }
    Ok((raises, entities))
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// One page answer of the device readings API.
enum Answer {
    Page(Vec<(i64, String, String)>, Option<String>),
    Retry(RetryKind),
    Refused(u16, String),
}

enum RetryKind {
    Connection,
    Server,
}

async fn get_page(
    client: &reqwest::Client,
    base: &str,
    device: &str,
    from: i64,
    to: i64,
    limit: u32,
    cursor: Option<&str>,
) -> Answer {
    let mut url = format!("{base}/devices/{device}/readings?from={from}&to={to}&limit={limit}");
    if let Some(c) = cursor {
        url.push_str("&cursor=");
        url.push_str(c);
    }
    let response = match client.get(&url).send().await {
        Ok(r) => r,
        Err(_) => return Answer::Retry(RetryKind::Connection),
    };
    let status = response.status().as_u16();
    let Ok(body) = response.text().await else {
        return Answer::Retry(RetryKind::Connection);
    };
    if status >= 500 {
        return Answer::Retry(RetryKind::Server);
    }
    if status != 200 {
        return Answer::Refused(status, truncate(&body, 300));
    }
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&body) else {
        return Answer::Refused(status, format!("not JSON: {}", truncate(&body, 200)));
    };
    let items = value["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    let ts = i["ts"]
                        .as_str()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map_or(i64::MIN, |t| t.timestamp_millis());
                    (
                        ts,
                        i["event_id"].as_str().unwrap_or_default().to_owned(),
                        i["device_id"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let next = value["next_cursor"].as_str().map(str::to_owned);
    Answer::Page(items, next)
}

/// Pages through `[from, to)` of `device` and checks every page: ascending by
/// (ts, event id), inside the range, of that device, no reading twice across pages.
/// Retries a page the server could not answer (restart, injected fault), boundedly.
async fn page_range(
    client: &reqwest::Client,
    base: &str,
    device: &str,
    from: i64,
    to: i64,
    limit: u32,
    (stats, violations): (&mut ReaderStats, &mut Vec<String>),
) -> Option<BTreeSet<(i64, String)>> {
    let mut cursor: Option<String> = None;
    let mut seen: BTreeSet<(i64, String)> = BTreeSet::new();
    let mut last: Option<(i64, String)> = None;
    let mut retries = 0;
    loop {
        match get_page(client, base, device, from, to, limit, cursor.as_deref()).await {
            Answer::Retry(kind) => {
                match kind {
                    RetryKind::Connection => stats.connection_errors += 1,
                    RetryKind::Server => stats.server_errors += 1,
                }
                retries += 1;
                if retries > 300 {
                    violations.push(format!("{device} [{from},{to}): no answer after 300 tries"));
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Answer::Refused(status, body) => {
                stats.client_errors += 1;
                violations.push(format!(
                    "{device} [{from},{to}) limit {limit}: {status} to a valid request: {body}"
                ));
                return None;
            }
            Answer::Page(items, next) => {
                stats.pages += 1;
                stats.items += items.len() as u64;
                check_page(
                    &RangeRead {
                        device,
                        from,
                        to,
                        limit,
                    },
                    items,
                    (&mut last, &mut seen),
                    violations,
                );
                match next {
                    Some(c) => cursor = Some(c),
                    None => {
                        stats.ranges += 1;
                        return Some(seen);
                    }
                }
            }
        }
    }
}

/// A reading's position in a paged read: (ts in ms, event id).
type Position = (i64, String);

/// One paged read: whose readings, which range, how many per page.
struct RangeRead<'a> {
    device: &'a str,
    from: i64,
    to: i64,
    limit: u32,
}

/// Checks one page of a paged read: at most `limit` items, all of the device and
/// inside the range, strictly after the previous reading (of this page or the pages
/// before) by (ts, event id), none seen before. Appends what is wrong to `violations`.
fn check_page(
    read: &RangeRead<'_>,
    items: Vec<(i64, String, String)>,
    (last, seen): (&mut Option<Position>, &mut BTreeSet<Position>),
    violations: &mut Vec<String>,
) {
    let RangeRead {
        device,
        from,
        to,
        limit,
    } = *read;
    if items.len() > limit as usize {
        violations.push(format!("a page of {} items for limit {limit}", items.len()));
    }
    for (ts, event, dev) in items {
        if dev != device {
            violations.push(format!("a page of {device} holds a reading of {dev}"));
        }
        if ts < from || ts >= to {
            violations.push(format!(
                "{device}: reading {event} at {ts} outside [{from},{to})"
            ));
        }
        let key = (ts, event);
        if last.as_ref().is_some_and(|l| *l >= key) {
            violations.push(format!("{device}: {key:?} does not come after {last:?}"));
        }
        if !seen.insert(key.clone()) {
            violations.push(format!("{device}: {key:?} returned twice"));
        }
        *last = Some(key);
    }
}

/// Every reading of `device` in `[from, to)` through the API, pages of `limit`.
async fn read_all(
    base: &str,
    device: &str,
    from: i64,
    to: i64,
    limit: u32,
) -> anyhow::Result<Vec<(i64, String)>> {
    let client = reqwest::Client::new();
    let mut stats = ReaderStats::default();
    let mut violations = Vec::new();
    let got = page_range(
        &client,
        base,
        device,
        from,
        to,
        limit,
        (&mut stats, &mut violations),
    )
    .await;
    if !violations.is_empty() {
        bail!("{}", violations.join("; "));
    }
    Ok(got.context("no complete read")?.into_iter().collect())
}

/// The reader: random ranges of the hot device and the fleet's top devices, until
/// stopped. Returns its counters, every (device, event) it was shown, and violations.
async fn reader_loop(
    base: String,
    start_ms: i64,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (ReaderStats, BTreeSet<(String, String)>, Vec<String>) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0ead_e500);
    let mut stats = ReaderStats::default();
    let mut seen = BTreeSet::new();
    let mut violations = Vec::new();
    let devices = [HOT_DEVICE, "dev-00000", "dev-00001", "dev-00002"];
    while !stop.load(Ordering::SeqCst) && violations.len() < 50 {
        let device = devices[rng.random_range(0..devices.len())];
        let now = store::clock::wall_clock().map_or(start_ms, |t| t.as_millis());
        let span = (now - start_ms).max(1_000) + 2_000;
        let from = start_ms - 2_000 + rng.random_range(0..span);
        let to = from + rng.random_range(500..20_000);
        let limit = rng.random_range(1..=200);
        if let Some(got) = page_range(
            &client,
            &base,
            device,
            from,
            to,
            limit,
            (&mut stats, &mut violations),
        )
        .await
        {
            seen.extend(got.into_iter().map(|(_, e)| (device.to_owned(), e)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (stats, seen, violations)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use query::{CursorKey, QueryService, ServiceConfig};
    use sharding::epoch::{FanoutHistory, TableHistory};
    use sharding::key::{ReadingRef, write_key};
    use sharding::layout::Layout;
    use sharding::time::Timestamp;
    use store::directory::ShardStore as _;
    use store::item::{Reading, ReadingItem};
    use store::memory::{MemoryReadings, MemoryShards};

    /// (ts, event id, device id) as the API returns them.
    type Row<'a> = (i64, &'a str, &'a str);

    fn page(items: &[Row<'_>]) -> Vec<(i64, String, String)> {
        items
            .iter()
            .map(|(ts, e, d)| (*ts, (*e).to_owned(), (*d).to_owned()))
            .collect()
    }

    /// Checks two pages of a read of dev-1 in [100, 200) with limit 2.
    fn check_two(first: &[Row<'_>], second: &[Row<'_>]) -> Vec<String> {
        let read = super::RangeRead {
            device: "dev-1",
            from: 100,
            to: 200,
            limit: 2,
        };
        let (mut last, mut seen) = (None, std::collections::BTreeSet::new());
        let mut violations = Vec::new();
        for p in [first, second] {
            super::check_page(&read, page(p), (&mut last, &mut seen), &mut violations);
        }
        violations
    }

    #[test]
    fn the_page_checker_passes_a_correct_read_and_names_each_wrong_page() {
        let good = [(100, "a", "dev-1"), (100, "b", "dev-1")];
        assert!(check_two(&good, &[(150, "a", "dev-1"), (199, "z", "dev-1")]).is_empty());

        let cases: [(&[Row<'_>], &str); 5] = [
            (&[(150, "c", "dev-2")], "holds a reading of dev-2"),
            (&[(200, "c", "dev-1")], "outside [100,200)"),
            (&[(100, "b", "dev-1")], "returned twice"),
            (&[(100, "a0", "dev-1")], "does not come after"),
            (
                &[
                    (150, "c", "dev-1"),
                    (151, "d", "dev-1"),
                    (152, "e", "dev-1"),
                ],
                "a page of 3 items for limit 2",
            ),
        ];
        for (second, expected) in cases {
            let violations = check_two(&good, second);
            assert!(
                violations.iter().any(|v| v.contains(expected)),
                "{second:?}: expected {expected:?}, got {violations:?}"
            );
        }
    }

    /// The soak's reader found the API blind while the table filled: a request made
    /// before the first write caches "no layout" for the directory TTL (60 s), and the
    /// layout the first writer then stores holds from the beginning of time, so every
    /// reading written within that minute is invisible to the API (200, empty pages).
    #[tokio::test]
    async fn a_read_before_the_first_write_does_not_hide_the_first_writes() {
        let source = MemoryReadings::new(None);
        let shards = MemoryShards::new();
        let key = CursorKey::new(b"soak-test-cursor-key-0123456789ab".to_vec()).expect("key");
        let service = QueryService::new(&source, shards.clone(), ServiceConfig::new(key));
        let path = "/devices/dev-1/readings";
        let range = "from=2026-06-22T00:00:00Z&to=2026-06-22T01:00:00Z";

        // Before anything is written: an empty page is right.
        let before = service.handle_parts("GET", path, Some(range)).await;
        assert_eq!(before.status().as_u16(), 200, "{}", before.body());

        // The first writer stores the layout (in force from the beginning of time) and
        // writes one reading inside the range.
        let layout = TableHistory::new(Layout::unsharded());
        assert!(shards.create_layout(&layout).await.expect("layout"));
        let ts = Timestamp::from_millis(1_782_086_400_000 + 60_000).expect("ts");
        let item_key = write_key(
            &ReadingRef {
                entity: "dev-1",
                event_id: "evt-1",
                ts,
                attribute: None,
            },
            &layout,
            &FanoutHistory::new(),
            ts,
        )
        .expect("key");
        let reading = Reading {
            device_id: "dev-1".to_owned(),
            event_id: "evt-1".to_owned(),
            ts,
            metrics: BTreeMap::from([("t".to_owned(), 1.0)]),
            tags: BTreeMap::new(),
        };
        source.put(ReadingItem::new(
            &reading,
            item_key,
            Duration::from_secs(86_400 * 365 * 100),
        ));

        // A read right after the write must see it (the directory TTL may only delay
        // epochs that take effect later, never the layout itself).
        let after = service.handle_parts("GET", path, Some(range)).await;
        assert_eq!(after.status().as_u16(), 200, "{}", after.body());
        let body: serde_json::Value = serde_json::from_str(after.body()).expect("JSON");
        assert_eq!(
            body["items"].as_array().map(Vec::len),
            Some(1),
            "the reading written after the first request is missing ({} calls reached the table): {body}",
            source.calls()
        );
    }
}
