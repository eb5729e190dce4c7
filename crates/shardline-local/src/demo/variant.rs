//! One run of the demo, on one layout: its own servers, proxy and runner (the rig),
//! the optional planned fan-out, the traffic, then what is left in the queues and the
//! table once everything stopped, and the heatmap; run 2 adds its dashboard before it
//! stops (see `dashboard`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use capacity_proxy::{MonotonicClock, Proxy, ProxyConfig, ProxyHandle, StatsSnapshot};
use sharding::capacity::CapacityPlan;
use shardline::env::EnvLookup;
use shardline::fanout;
use store::directory::PlannedFanout;

use super::bill::{self, Counted};
use super::dashboard::{self, Dashboard};
use super::measure::{self, ReadBack};
use super::servers::{ServerGuard, Tools};
use super::watch::Watch;
use super::{RunReport, Scenario};
use crate::accounting::Accounting;
use crate::publish::{Manifest, Summary};
use crate::run_local::{self, DeadLetterCopy, Settings, Stats};

/// The two layouts compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `SHARD_STRATEGY=unsharded`: `PK = device`.
    Naive,
    /// Time buckets over N shards, per-device fan-out raised on throttles.
    Adaptive,
}

impl Variant {
    /// Short name, used in file names.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Naive => "unsharded",
            Variant::Adaptive => "sharded",
        }
    }
}

/// Runs `variant` on its own servers, proxy and runner, and reports what it did.
pub(super) async fn run_variant(
    scenario: &Scenario,
    plan: &CapacityPlan,
    tools: &Tools,
    variant: Variant,
) -> anyhow::Result<RunReport> {
    let planned_k = (variant == Variant::Adaptive && scenario.planned_fanout)
        .then_some(plan.hot_entity_fanout)
        .filter(|&k| k > 1);
    let layout = layout_label(variant, planned_k, scenario.ingest.blocks, plan);
    scenario.say(format!("== run {}: {layout}", variant.name()));
    let rig = Rig::start(scenario, plan, tools, variant).await?;
    if let Some(k) = planned_k {
        schedule_hot_fanout(scenario, variant, &rig.env, &rig.proxy.url(), k).await?;
    }
    let traffic = rig.drive(scenario, variant).await?;
    let dashboard = match variant {
        Variant::Naive => None,
        Variant::Adaptive => Some(rig.dashboard(scenario, traffic.start).await),
    };
    let settled = rig.settle(&traffic.sqs).await?;
    let heat = measure::draw_heat(
        scenario,
        variant,
        &settled.heat_csv,
        &traffic.read.fanout,
        &settled.table,
        settled.proxy_origin_ms,
    )?;
    let counts = bill::counts(scenario, &traffic.counted, settled.stored_bytes);
    let bill = bill::run_bill(scenario, variant, counts).map_err(|e| format!("{e:#}"));
    let report = RunReport {
        bill,
        variant,
        layout,
        sent: traffic.sent,
        written: settled.written,
        stored_twice: settled.items - settled.written,
        accounting: settled.accounting,
        write_units: settled
            .proxy
            .wcu_by_table
            .get(&settled.table)
            .copied()
            .unwrap_or(0.0),
        runner: settled.runner,
        proxy: settled.proxy,
        dlq: settled.dlq,
        dlq_copies: settled.dlq_copies,
        queued_visible: settled.queued_visible,
        queued_invisible: settled.queued_invisible,
        drain: traffic.drain,
        drained: traffic.drained,
        hot_query: traffic.read.hot_query,
        fleet_query: traffic.read.fleet_query,
        fanout: traffic.read.fanout,
        throttles_after_raise: heat.throttles_after_raise,
        throttles_before_raise: heat.throttles_before_raise,
        heatmap: heat.heatmap,
        heat_csv: settled.heat_csv,
        dashboard,
    };
    scenario.say(format!(
        "  [{}] done: {} readings written of {}, {} throttled, {} still queued",
        variant.name(),
        report.written,
        report.sent.sent.readings,
        report.throttled(),
        report.queued_visible + report.queued_invisible
    ));
    Ok(report)
}

/// One run's servers, proxy and runner. Fields drop in order: the runner and the proxy
/// before the servers they use.
struct Rig {
    running: run_local::Running,
    query_addr: SocketAddr,
    env: EnvLookup,
    proxy: ProxyHandle,
    /// The proxy's heat CSV, and the wall time its seconds count from.
    heat_csv: PathBuf,
    proxy_origin_ms: i64,
    stack: stand_in::Stack,
    /// The publisher's manifest and the runner's received log, in the output directory.
    manifest: PathBuf,
    received_log: PathBuf,
    moto_url: String,
    dynalite_url: String,
    dynalite: ServerGuard,
    moto: ServerGuard,
}

/// What a run's publisher sent and how the queue drained, then what the API read.
struct Traffic {
    /// The client of the run's SQS (moto).
    sqs: aws_sdk_sqs::Client,
    /// When publishing started: the first reading's time.
    start: sharding::time::Timestamp,
    sent: Summary,
    drain: Duration,
    drained: bool,
    /// What the pipeline used, counted once the queue drained.
    counted: Counted,
    read: ReadBack,
}

/// What was left once the runner and the proxy stopped: their counters, the queues,
/// the table.
struct Settled {
    runner: Stats,
    proxy: StatsSnapshot,
    queued_visible: u64,
    queued_invisible: u64,
    /// Distinct messages in the DLQ, and the copies read.
    dlq: u64,
    dlq_copies: u64,
    /// Items in the readings table, and distinct readings among them.
    items: u64,
    written: u64,
    /// What became of each message the publisher had accepted.
    accounting: Accounting,
    /// The readings table's bytes as DynamoDB bills storage.
    stored_bytes: f64,
    table: String,
    heat_csv: PathBuf,
    proxy_origin_ms: i64,
}

impl Rig {
    /// Starts the servers, provisions the stack, and starts the proxy (in front of
    /// dynalite) and the runner.
    async fn start(
        scenario: &Scenario,
        plan: &CapacityPlan,
        tools: &Tools,
        variant: Variant,
    ) -> anyhow::Result<Self> {
        let (moto, dynalite) = ServerGuard::start_pair(tools, &scenario.root, variant).await?;
        let (moto_url, dynalite_url) = (moto.endpoint()?, dynalite.endpoint()?);
        let stack = provision(scenario, variant, &moto_url, &dynalite_url).await?;
        let heat_csv = scenario
            .out_dir
            .join(format!("heat-{}.csv", variant.name()));
        let (proxy, proxy_origin_ms) = start_proxy(scenario, &dynalite_url, &heat_csv).await?;
        let mut env = ingest_env(scenario, plan, &stack, variant);
        env.set("AWS_ENDPOINT_URL_SQS", &moto_url);
        let (manifest, received_log) = (
            scenario
                .out_dir
                .join(format!("manifest-{}.jsonl", variant.name())),
            scenario
                .out_dir
                .join(format!("received-{}.txt", variant.name())),
        );
        // The runner appends to its received log: start from an empty one.
        match std::fs::remove_file(&received_log) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", received_log.display()));
            }
            _ => {}
        }
        let mut settings = Settings::new(&stack.queue_url);
        settings.batching_window = scenario.batching_window;
        settings.batch_size = scenario.batch_size;
        settings.max_concurrency = scenario.max_concurrency;
        settings.received_log = Some(received_log.clone());
        let running = run_local::start(settings, &env, Some(&proxy.url())).await?;
        let query_addr = running.query_addr().context("the query API is not up")?;
        Ok(Self {
            running,
            query_addr,
            env,
            proxy,
            heat_csv,
            proxy_origin_ms,
            stack,
            manifest,
            received_log,
            moto_url,
            dynalite_url,
            dynalite,
            moto,
        })
    }

    /// Publishes the scenario, drains the queue, and reads back through the API.
    async fn drive(&self, scenario: &Scenario, variant: Variant) -> anyhow::Result<Traffic> {
        // The devices talk to SQS itself, not through the DynamoDB emulator.
        let sqs = aws_sdk_sqs::Client::new(&stand_in::sdk_config(&self.moto_url).await);
        let watch = Watch {
            scenario,
            variant,
            running: &self.running,
            proxy: &self.proxy,
            t0: Instant::now(),
        };
        let start = store::clock::wall_clock()?;
        let sent = watch
            .publish(&sqs, &self.stack.queue_url, start, &self.manifest)
            .await?;
        let (drain, drained) = watch.drain(&sqs, &self.stack.queue_url).await?;
        let counted = self.count().await?;
        let read = measure::read_back(scenario, self.query_addr, start).await?;
        Ok(Traffic {
            sqs,
            start,
            sent,
            drain,
            drained,
            counted,
            read,
        })
    }

    /// What the pipeline used so far: the runner's and the proxy's counters, and the
    /// SQS requests the run's moto answered.
    async fn count(&self) -> anyhow::Result<Counted> {
        let url = self.moto_url.clone();
        let sqs = tokio::task::spawn_blocking(move || stand_in::SqsRequests::read(&url))
            .await
            .context("the SQS count task failed")??;
        Ok(Counted {
            runner: self.running.stats(),
            proxy: self.proxy.stats(),
            sqs,
        })
    }

    /// The dashboard of the readings published from `start` (see [`dashboard`]), built
    /// while the runner's query API is up; why not, when it could not be.
    async fn dashboard(
        &self,
        scenario: &Scenario,
        start: sharding::time::Timestamp,
    ) -> Result<Dashboard, String> {
        scenario.say(format!(
            "  [{}] dashboard: resealing the run's hours, reading them back",
            Variant::Adaptive.name()
        ));
        let sources = dashboard::Sources {
            query_addr: self.query_addr,
            dynalite_url: &self.dynalite_url,
            env: &self.env,
        };
        dashboard::build(scenario, sources, start)
            .await
            .map_err(|e| format!("{e:#}"))
    }

    /// Stops the runner and the proxy, counts what is left in the queues and the
    /// table, then stops the servers.
    async fn settle(self, sqs: &aws_sdk_sqs::Client) -> anyhow::Result<Settled> {
        let Rig {
            moto,
            dynalite,
            dynalite_url,
            stack,
            manifest,
            received_log,
            heat_csv,
            proxy_origin_ms,
            proxy,
            running,
            ..
        } = self;
        running.stop();
        let runner = running.wait().await?;
        let proxy_stats = proxy.stats();
        proxy
            .shutdown()
            .await
            .map_err(|e| anyhow!("stopping capacity-proxy: {e}"))?;
        let (queued_visible, queued_invisible) =
            run_local::queue_counts(sqs, &stack.queue_url).await?;
        let letters = run_local::drain_dlq(sqs, &stack.dlq_url).await?;
        let (dlq, dlq_copies) = dead_letters(&letters);
        let dynamo = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&dynalite_url).await);
        let measure::Stored {
            held: items,
            readings: stored,
            bytes: stored_bytes,
        } = measure::stored(&dynamo, &stack.table_name).await?;
        drop((moto, dynalite));
        let accounting = Accounting::of(
            &Manifest::read(&manifest)?,
            &run_local::read_received(&received_log)?,
            &stored,
            &letters.iter().filter_map(|l| l.source.clone()).collect(),
        );
        Ok(Settled {
            runner,
            proxy: proxy_stats,
            queued_visible,
            queued_invisible,
            dlq,
            dlq_copies,
            items,
            written: stored.len() as u64,
            accounting,
            stored_bytes,
            table: stack.table_name,
            heat_csv,
            proxy_origin_ms,
        })
    }
}

/// The queues on moto, the tables (same names) on dynalite.
async fn provision(
    scenario: &Scenario,
    variant: Variant,
    moto_url: &str,
    dynalite_url: &str,
) -> anyhow::Result<stand_in::Stack> {
    let prefix = format!("demo-{}-{}", std::process::id(), variant.name());
    let template = scenario.root.join("template.yaml");
    crate::provision::queues_on_moto_tables_on_dynalite(&template, &prefix, moto_url, dynalite_url)
        .await
}

/// capacity-proxy in front of dynalite, with the scenario's per-key limit, writing its
/// heat CSV to `heat_csv`; returns it and the wall time its heat seconds count from.
async fn start_proxy(
    scenario: &Scenario,
    dynalite_url: &str,
    heat_csv: &Path,
) -> anyhow::Result<(ProxyHandle, i64)> {
    let mut config = ProxyConfig::forward(dynalite_url)?;
    config.limits.key_wcu = scenario.key_wcu;
    config.heat_csv = Some(heat_csv.to_path_buf());
    // The heat CSV counts seconds from the proxy clock's origin; keep its wall time.
    let proxy_origin_ms = store::clock::wall_clock()?.as_millis();
    config.clock = Arc::new(MonotonicClock::new());
    let proxy = Proxy::start(config).await?;
    Ok((proxy, proxy_origin_ms))
}

/// Distinct messages among a DLQ's `letters` (by their `source_message_id`, and each
/// one without), and the letters, copies included.
fn dead_letters(letters: &[DeadLetterCopy]) -> (u64, u64) {
    // Read back, not counted: a message can be dead-lettered twice (SQS delivers at
    // least once: a runner stopped between the handler's DLQ send and its delete), and
    // the promise is about which messages reach the DLQ, each with its reason.
    // A message without a source id (moved by the redrive, not sent by the handler)
    // counts on its own.
    let sources: BTreeSet<&str> = letters.iter().filter_map(|l| l.source.as_deref()).collect();
    let unsourced = letters.iter().filter(|l| l.source.is_none()).count();
    ((sources.len() + unsourced) as u64, letters.len() as u64)
}

/// The ingest's variables for `variant`: the stack's, the scenario's tuning, and the
/// layout.
fn ingest_env(
    scenario: &Scenario,
    plan: &CapacityPlan,
    stack: &stand_in::Stack,
    variant: Variant,
) -> EnvLookup {
    let t = &scenario.ingest;
    let mut env = EnvLookup::from_pairs(stack.env_pairs());
    for (k, v) in [
        ("MAX_FUTURE_SECS", t.max_future_secs.to_string()),
        ("SHARD_CACHE_TTL_SECS", t.cache_ttl_secs.to_string()),
        ("PROPAGATION_SLACK_SECS", t.slack_secs.to_string()),
        ("FANOUT_COOLDOWN_SECS", t.cooldown_secs.to_string()),
        ("FANOUT_JITTER_SECS", t.jitter_secs.to_string()),
        ("RETRY_MAX_ATTEMPTS", t.retry_max_attempts.to_string()),
        ("MAX_INFLIGHT", t.max_inflight.to_string()),
        // Raising ahead of throttles at a tenth of a key's limit, as the default (100 of
        // 1,000 WCU/s) does in AWS, scaled to the demo's per-key limit.
        ("RAISE_AHEAD_WCU", scenario.raise_ahead_wcu().to_string()),
    ] {
        env.set(k, v);
    }
    match variant {
        Variant::Naive => {
            // What every peer does: PK = device, an item a reading.
            env.set("SHARD_STRATEGY", "unsharded");
            env.set("BLOCKS", "off");
            env.set("FANOUT_MAX", "1");
        }
        Variant::Adaptive => {
            // The bucket is the template's default (hour).
            env.set("SHARD_STRATEGY", "time-bucket");
            env.set("SHARDS", plan.table_shards.to_string());
            env.set("BLOCKS", if t.blocks { "on" } else { "off" });
        }
    }
    env
}

/// Schedules fan-out `k` for the hot device (what `shardline fanout` does) and waits
/// until it is in force, so the first hot reading already spreads over `k` keys.
async fn schedule_hot_fanout(
    scenario: &Scenario,
    variant: Variant,
    env: &EnvLookup,
    endpoint: &str,
    k: u32,
) -> anyhow::Result<()> {
    let planned = fanout::schedule(env, Some(endpoint), &scenario.hot_device, k).await?;
    scenario.say(format!(
        "  [{}] planned: {}",
        variant.name(),
        fanout::describe(&scenario.hot_device, &planned)
    ));
    if let PlannedFanout::Scheduled(raise) = planned {
        let wait = raise.effective_from.as_millis() - store::clock::wall_clock()?.as_millis();
        if let Ok(wait) = u64::try_from(wait) {
            // One more millisecond: the wall clock reads whole milliseconds.
            tokio::time::sleep(Duration::from_millis(wait + 1)).await;
        }
    }
    Ok(())
}

/// What the report calls `variant`'s layout.
fn layout_label(
    variant: Variant,
    planned_k: Option<u32>,
    blocks: bool,
    plan: &CapacityPlan,
) -> String {
    let packing = if blocks {
        "blocks"
    } else {
        "an item a reading"
    };
    match (variant, planned_k) {
        (Variant::Naive, _) => "unsharded: PK = device, an item a reading".to_owned(),
        (Variant::Adaptive, Some(k)) => format!(
            "time-bucket (hour), N = {}, {packing}, hot device k = {k} planned, raised on heat",
            plan.table_shards
        ),
        (Variant::Adaptive, None) => format!(
            "time-bucket (hour), N = {}, {packing}, fan-out k from 1, raised on heat",
            plan.table_shards
        ),
    }
}
