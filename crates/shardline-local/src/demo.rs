//! `shardline-local demo`: the reference scenario of seed 001, scaled to the machine, run twice
//! on identical load, and one side-by-side report.
//!
//! Each run gets its own private moto for SQS, its own dynalite for DynamoDB, an
//! in-process `capacity-proxy` in front of dynalite (per-key write limit, its own heat
//! CSV) and the local runner (ingest and query in process). The publisher and the
//! runner reach moto's SQS directly; ingest and query reach DynamoDB through the proxy.
//! dynalite, not moto, holds the tables because it keeps each partition's items in key
//! order, so a Query reads one key's range as DynamoDB does; moto answers every Query
//! by scanning the whole table, which made the demo's reads take tens of seconds.
//!
//! 1. The seed's naive layout (`SHARD_STRATEGY=unsharded`, `PK = device`): the hot
//!    device is one partition key and is capped at the per-key limit.
//! 2. Adaptive hybrid: time buckets over N table shards sized by the planner for the
//!    scaled rates, with the hot device's fan-out k starting at 1 and raised by the
//!    ingest when it sees key-range throttles.
//!
//! The throttled backlog of run 1 is not waited out: messages the handler reported come
//! back only after the queue's visibility timeout, so after a bounded drain period the
//! report says what is still queued.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use capacity_proxy::{MonotonicClock, Proxy, ProxyConfig, StatsSnapshot};
use clap::Args;
use indicatif::ProgressBar;
use serde::Deserialize;
use sharding::capacity::{CapacityPlan, DEFAULT_SAFETY, PlanInput, plan_capacity};
use stand_in::pids::PidRecord;
use store::directory::PlannedFanout;

use crate::heatmap;
use crate::publish::{self, Generator, Plan, SendOptions, Summary};
use crate::run_local::{self, Settings, Stats};
use shardline::env::EnvLookup;
use shardline::fanout;

/// The hot sensor of seed 001.
pub const HOT_DEVICE: &str = "sensor-alpha-001";
/// Where the demo writes heat CSVs, heatmaps and the report (under the repository root).
pub const DEFAULT_OUT_DIR: &str = ".local/demo";
/// The fleet's busiest device (Zipf rank 1), whose range the demo reads besides the hot
/// device's.
pub const FLEET_DEVICE: &str = "dev-00001";
/// The log file of a demo, in its output directory.
pub const LOG_FILE: &str = "demo.log";
/// Prefix of the pid files of the demo's servers (moto, dynalite): `demo-<pid>-...`.
pub const PID_PREFIX: &str = "demo-";
/// Most items one query page asks for (the API's maximum).
const PAGE_LIMIT: u32 = 1000;
/// Readings table item bytes beyond the message body (key attributes and names).
const ITEM_OVERHEAD_BYTES: u64 = 120;

/// Flags of `shardline-local demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Seconds each run publishes.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Devices in the fleet (Zipf-distributed popularity).
    #[arg(long, default_value_t = 500)]
    pub devices: u32,
    /// Readings per second of the whole fleet.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// The hot device.
    #[arg(long, default_value = HOT_DEVICE)]
    pub hot_device: String,
    /// Readings per second of the hot device. Seed 001's sensor sends 2,000/s against a
    /// 1,000 WCU/s key; the local stand-in on this 2-core machine stores well under 2,000 items/s, so
    /// the default keeps the ratio (hot = 2x the per-key limit) at a fifth of the rate.
    #[arg(long, default_value_t = 400.0)]
    pub hot_rate: f64,
    /// Fraction of malformed messages.
    #[arg(long, default_value_t = 0.01)]
    pub bad_rate: f64,
    /// Readings per SQS message (moto's queue work grows with the messages it holds, so
    /// the demo packs many readings into each).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Write capacity units per second per partition key (DynamoDB: 1,000; scaled
    /// with --hot-rate by default).
    #[arg(long, default_value_t = 200.0)]
    pub key_wcu: f64,
    /// Longest wait, after publishing, for the queue to drain, seconds.
    #[arg(long, default_value_t = 20.0)]
    pub drain: f64,
    /// Width of the time range read back through the API, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub query_secs: f64,
    /// Seed of the device simulator (both runs send the same stream).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Schedule the planner's fan-out for the hot device before run 2 publishes (what an
    /// operator who knows the load is coming does with `shardline fanout`), instead of
    /// leaving it to the ingest's raises.
    #[arg(long)]
    pub planned: bool,
    /// Output directory (heat CSVs, heatmaps, report).
    #[arg(long, default_value = DEFAULT_OUT_DIR)]
    pub out_dir: PathBuf,
    /// MAX_FUTURE_SECS of the ingest (the production default).
    #[arg(long, default_value_t = 300)]
    pub max_future_secs: u64,
    /// CACHE_TTL_SECS of the ingest (the production default).
    #[arg(long, default_value_t = 60)]
    pub cache_ttl_secs: u64,
    /// FANOUT_COOLDOWN_SECS of the ingest (the production default).
    #[arg(long, default_value_t = 2)]
    pub cooldown_secs: u64,
    /// PROPAGATION_SLACK_SECS of the ingest (the production default).
    #[arg(long, default_value_t = 5)]
    pub slack_secs: u64,
    /// FANOUT_JITTER_SECS of the ingest (the production default).
    #[arg(long, default_value_t = 1)]
    pub fanout_jitter_secs: u64,
    /// RETRY_MAX_ATTEMPTS of the ingest's batch writer (the deadline bounds it too).
    #[arg(long, default_value_t = 40)]
    pub retry_max_attempts: u32,
    /// The runner's batching window, seconds.
    #[arg(long, default_value_t = 1.0)]
    pub batching_window: f64,
    /// Messages per handler invocation (the mapping's BatchSize): small enough that an
    /// invocation's writes fit its deadline on the local stand-in.
    #[arg(long, default_value_t = 10)]
    pub batch_size: usize,
    /// The runner's concurrent invocations.
    #[arg(long, default_value_t = 8)]
    pub max_concurrency: usize,
    /// MAX_INFLIGHT of the ingest: concurrent BatchWriteItem calls per invocation.
    #[arg(long, default_value_t = 4)]
    pub max_inflight: usize,
}

impl DemoArgs {
    /// The scenario of these flags, relative to `root` (the repository root).
    /// The output directory, under `root` unless absolute.
    pub fn out_dir(&self, root: &Path) -> PathBuf {
        if self.out_dir.is_absolute() {
            self.out_dir.clone()
        } else {
            root.join(&self.out_dir)
        }
    }

    /// Where the handler's and the runner's logs go: [`LOG_FILE`] in the output
    /// directory, so the terminal shows only progress and the report.
    pub fn log_path(&self, root: &Path) -> PathBuf {
        self.out_dir(root).join(LOG_FILE)
    }

    pub fn scenario(&self, root: &Path) -> anyhow::Result<Scenario> {
        let secs = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(anyhow!("--{name} must be a positive number of seconds"))
            }
        };
        let out_dir = self.out_dir(root);
        let scenario = Scenario {
            root: root.to_path_buf(),
            out_dir,
            devices: self.devices,
            fleet_rate: self.rate,
            hot_device: self.hot_device.clone(),
            hot_rate: self.hot_rate,
            duration: secs("duration", self.duration)?,
            bad_rate: self.bad_rate,
            batch: self.batch,
            seed: self.seed,
            key_wcu: self.key_wcu,
            drain: secs("drain", self.drain)?,
            query_window: secs("query-secs", self.query_secs)?,
            planned_fanout: self.planned,
            ingest: IngestTuning {
                max_future_secs: self.max_future_secs,
                cache_ttl_secs: self.cache_ttl_secs,
                cooldown_secs: self.cooldown_secs,
                slack_secs: self.slack_secs,
                jitter_secs: self.fanout_jitter_secs,
                retry_max_attempts: self.retry_max_attempts,
                max_inflight: self.max_inflight,
            },
            batching_window: secs("batching-window", self.batching_window)?,
            batch_size: self.batch_size,
            max_concurrency: self.max_concurrency,
            verbose: true,
        };
        scenario.validate()?;
        Ok(scenario)
    }
}

/// The ingest settings the demo passes (the production fan-out defaults unless changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestTuning {
    /// `MAX_FUTURE_SECS`.
    pub max_future_secs: u64,
    /// `CACHE_TTL_SECS`.
    pub cache_ttl_secs: u64,
    /// `FANOUT_COOLDOWN_SECS`.
    pub cooldown_secs: u64,
    /// `PROPAGATION_SLACK_SECS`.
    pub slack_secs: u64,
    /// `FANOUT_JITTER_SECS`.
    pub jitter_secs: u64,
    /// `RETRY_MAX_ATTEMPTS`.
    pub retry_max_attempts: u32,
    /// `MAX_INFLIGHT`.
    pub max_inflight: usize,
}

impl IngestTuning {
    /// The propagation margin: a shrink decided now takes effect this much later.
    pub fn margin_secs(&self) -> u64 {
        self.cache_ttl_secs + self.max_future_secs + self.slack_secs
    }
}

/// Everything one demo needs.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The repository root (template.yaml, `.local/`).
    pub root: PathBuf,
    /// Where heat CSVs, heatmaps and the report go.
    pub out_dir: PathBuf,
    /// Fleet size.
    pub devices: u32,
    /// Fleet readings per second.
    pub fleet_rate: f64,
    /// The hot device.
    pub hot_device: String,
    /// Its readings per second.
    pub hot_rate: f64,
    /// How long each run publishes.
    pub duration: Duration,
    /// Fraction of malformed messages.
    pub bad_rate: f64,
    /// Readings per message.
    pub batch: usize,
    /// Simulator seed.
    pub seed: u64,
    /// Per-key WCU/s of the proxy (and the planner's partition limit).
    pub key_wcu: f64,
    /// Longest drain after publishing.
    pub drain: Duration,
    /// Width of the range read back.
    pub query_window: Duration,
    /// Run 2 schedules the planner's hot fan-out for the hot device before publishing.
    pub planned_fanout: bool,
    /// Ingest settings.
    pub ingest: IngestTuning,
    /// The runner's batching window.
    pub batching_window: Duration,
    /// Messages per invocation.
    pub batch_size: usize,
    /// The runner's concurrency.
    pub max_concurrency: usize,
    /// Progress lines on stderr.
    pub verbose: bool,
}

impl Scenario {
    fn validate(&self) -> anyhow::Result<()> {
        self.plan(0).validate().map_err(|e| anyhow!(e))?;
        if !(self.key_wcu.is_finite() && self.key_wcu > 0.0) {
            bail!("--key-wcu must be positive");
        }
        if self.hot_rate <= 0.0 {
            bail!("--hot-rate must be positive: the demo is about a hot device");
        }
        if self.batch_size == 0 || self.batch_size > 10_000 {
            bail!("--batch-size must be 1 to 10000");
        }
        if self.max_concurrency == 0 {
            bail!("--max-concurrency must be at least 1");
        }
        Ok(())
    }

    /// The publisher's plan; both runs send the same stream.
    pub fn plan(&self, max_messages: u64) -> Plan {
        Plan {
            devices: self.devices,
            rate: self.fleet_rate,
            duration: self.duration,
            hot_device: Some(self.hot_device.clone()),
            hot_rate: self.hot_rate,
            jitter: Duration::ZERO,
            batch: self.batch,
            bad_rate: self.bad_rate,
            seed: self.seed,
            max_messages: (max_messages > 0).then_some(max_messages),
            zipf_exponent: 1.0,
        }
    }

    /// Bytes of one readings-table item, estimated from a generated reading.
    pub fn item_bytes(&self) -> u64 {
        let mut plan = self.plan(64);
        plan.bad_rate = 0.0;
        let sample = sharding::time::Timestamp::from_millis(1_750_000_000_000)
            .ok()
            .and_then(|start| Generator::new(plan, start).ok())
            .and_then(|mut g| g.find(|m| m.readings() > 0));
        let per_reading = sample.map_or(300, |m| (m.body.len() / m.readings().max(1)) as u64);
        per_reading + ITEM_OVERHEAD_BYTES
    }

    /// The planner's answer for the scaled rates, with the proxy's per-key limit.
    pub fn capacity_plan(&self) -> anyhow::Result<CapacityPlan> {
        plan_capacity(&PlanInput {
            global_wps: self.fleet_rate + self.hot_rate,
            peak_entity_wps: self.hot_rate,
            item_bytes: self.item_bytes(),
            safety: DEFAULT_SAFETY,
            partition_wcu: self.key_wcu,
            table_shards: None,
        })
        .context("cannot plan the table shards")
    }

    fn say(&self, line: impl AsRef<str>) {
        if self.verbose {
            eprintln!("{}", line.as_ref());
        }
    }
}

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

/// One read of a time range through the API, all pages.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    /// What was read.
    pub what: String,
    /// Readings returned over all pages.
    pub items: u64,
    /// Pages (HTTP requests).
    pub pages: u64,
    /// Wall time of all pages.
    pub elapsed: Duration,
    /// The API's refusal, if it refused (status and body).
    pub refused: Option<String>,
}

impl QueryResult {
    fn cell(&self) -> String {
        match &self.refused {
            Some(why) => format!("refused: {why}"),
            None => format!(
                "{} items, {} pages, {} ms",
                self.items,
                self.pages,
                self.elapsed.as_millis()
            ),
        }
    }
}

/// A fan-out epoch of the hot device, as the API lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FanoutEpoch {
    /// RFC 3339 time it took effect.
    pub effective_from: String,
    /// The fan-out k.
    pub k: u32,
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Which layout.
    pub variant: Variant,
    /// The layout in words.
    pub layout: String,
    /// What the publisher sent.
    pub sent: Summary,
    /// Items in the readings table at the end (distinct readings: one item per key).
    pub written: u64,
    /// Items beyond one per reading: readings stored under two keys (a redelivery re-keyed
    /// after a raise), which every read answers once.
    pub stored_twice: u64,
    /// The runner's counters.
    pub runner: Stats,
    /// The proxy's counters.
    pub proxy: StatsSnapshot,
    /// Distinct messages in the DLQ: by their `source_message_id`, and each one without.
    pub dlq: u64,
    /// DLQ messages read back, copies included.
    pub dlq_copies: u64,
    /// Messages still in the source queue: visible, and in flight or waiting out the
    /// visibility timeout.
    pub queued_visible: u64,
    /// See `queued_visible`.
    pub queued_invisible: u64,
    /// How long the drain took, and whether the queue emptied.
    pub drain: Duration,
    /// True if the queue emptied within the drain period.
    pub drained: bool,
    /// The hot device's range read.
    pub hot_query: QueryResult,
    /// The busiest fleet device's range read ([`FLEET_DEVICE`]).
    pub fleet_query: QueryResult,
    /// The hot device's fan-out epochs.
    pub fanout: Vec<FanoutEpoch>,
    /// Throttled items from the second in which the hot fan-out first grew (planned or
    /// raised).
    pub throttles_after_raise: Option<u64>,
    /// Throttled items before that second.
    pub throttles_before_raise: Option<u64>,
    /// The heatmap PNG.
    pub heatmap: PathBuf,
    /// The heat CSV.
    pub heat_csv: PathBuf,
}

impl RunReport {
    /// Throttled items (or single-item calls) in all.
    pub fn throttled(&self) -> u64 {
        self.proxy.throttled_by_reason.values().sum()
    }
}

/// The whole demo.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// The scenario.
    pub scenario: Scenario,
    /// The planner's answer.
    pub plan: CapacityPlan,
    /// Run 1.
    pub naive: RunReport,
    /// Run 2.
    pub adaptive: RunReport,
    /// Wall time of both runs.
    pub elapsed: Duration,
}

/// The settings block printed before the runs: what is tuned for the demo, and why.
pub fn settings_text(s: &Scenario, plan: &CapacityPlan) -> String {
    let t = &s.ingest;
    format!(
        "Scenario: {devices} Zipf devices at {fleet} readings/s + {hot} at {hot_rate} readings/s for {dur} s, \
         {batch} readings per message, {bad}% malformed messages, seed {seed}; the same stream twice.\n\
         Each run: a private moto (SQS) and dynalite (DynamoDB), capacity-proxy in process ({wcu} WCU/s per partition key, its own heat CSV), \
         run-local in process (batch size {bs}, window {win} s, {conc} concurrent invocations, queue visibility 185 s, \
         5 receives before the DLQ).\n\
         Planner for {global} writes/s ({hot_rate} on {hot}), ~{bytes}-byte items, per-key limit {wcu} WCU/s, safety {safety}: \
         N = {n} table shards, hot fan-out k = {k} expected.\n\
         Ingest settings of the demo (the production fan-out defaults are 300/60/5/2/1 s):\n  \
         MAX_FUTURE_SECS={mf} CACHE_TTL_SECS={ttl} PROPAGATION_SLACK_SECS={slack} FANOUT_COOLDOWN_SECS={cd} FANOUT_JITTER_SECS={jit} \
         RETRY_MAX_ATTEMPTS={retries} MAX_INFLIGHT={inflight} RAISE_AHEAD_WCU={key_rate}\n  \
         Fan-out keys nest, so a raise is in force the moment it is decided: to the k the measured rate needs at \
         RAISE_AHEAD_WCU readings/s per key (a tenth of the per-key limit, as the default 100 of 1,000 is), or the next \
         doubling on a throttle; a throttled writer re-reads the device's fan-out at once and re-keys what it has \
         not written. Raises are at least the cooldown ({cd} s) apart; only a shrink waits for the margin \
         ({margin} s = cache TTL {ttl} + future skew {mf} + slack {slack}). The writer retries throttled items up \
         to {retries} times within the handler's deadline instead of handing them back to the queue for 185 s.\n  \
         Run 1 uses FANOUT_MAX=1: the naive layout has no fan-out to raise. {planned}",
        devices = s.devices,
        fleet = s.fleet_rate,
        hot = s.hot_device,
        hot_rate = s.hot_rate,
        dur = s.duration.as_secs_f64(),
        batch = s.batch,
        bad = s.bad_rate * 100.0,
        seed = s.seed,
        wcu = s.key_wcu,
        bs = s.batch_size,
        win = s.batching_window.as_secs_f64(),
        conc = s.max_concurrency,
        global = s.fleet_rate + s.hot_rate,
        bytes = s.item_bytes(),
        safety = DEFAULT_SAFETY,
        n = plan.table_shards,
        k = plan.hot_entity_fanout,
        mf = t.max_future_secs,
        ttl = t.cache_ttl_secs,
        slack = t.slack_secs,
        cd = t.cooldown_secs,
        jit = t.jitter_secs,
        retries = t.retry_max_attempts,
        inflight = t.max_inflight,
        margin = t.margin_secs(),
        key_rate = s.key_wcu / 10.0,
        planned = if s.planned_fanout {
            format!(
                "Run 2 schedules k = {k} for {hot} before it publishes (`shardline fanout`, --planned), as \
                 an operator who knows the load is coming would.",
                k = plan.hot_entity_fanout,
                hot = s.hot_device
            )
        } else {
            "Run 2 leaves the hot device's fan-out to the ingest's raises (--planned schedules it \
             ahead instead)."
                .to_owned()
        },
    )
}

/// Runs both variants and returns the report.
pub async fn run(scenario: &Scenario) -> anyhow::Result<DemoReport> {
    let started = Instant::now();
    let plan = scenario.capacity_plan()?;
    std::fs::create_dir_all(&scenario.out_dir)
        .with_context(|| format!("cannot create {}", scenario.out_dir.display()))?;
    scenario.say(settings_text(scenario, &plan));
    let root = scenario.root.clone();
    let tools = tokio::task::spawn_blocking(move || -> anyhow::Result<Tools> {
        Ok(Tools {
            venv: stand_in::ensure_venv(&root)?,
            node: stand_in::ensure_dynalite(&root)?,
        })
    })
    .await
    .context("the install task failed")??;
    // The runs share nothing but the machine (each has its own servers, proxy and
    // runner), so they run side by side: the demo takes one run's time, not two.
    let (naive, adaptive) = tokio::try_join!(
        run_variant(scenario, &plan, &tools, Variant::Naive),
        run_variant(scenario, &plan, &tools, Variant::Adaptive),
    )?;
    Ok(DemoReport {
        scenario: scenario.clone(),
        plan,
        naive,
        adaptive,
        elapsed: started.elapsed(),
    })
}

/// The stand-in's installed tools: moto's venv and dynalite's node packages.
#[derive(Debug, Clone)]
struct Tools {
    venv: stand_in::Venv,
    node: stand_in::NodeTools,
}

/// A local server recorded in `.local/pids` (so `cargo xtask demo` can stop it even if
/// this process dies), stopped when dropped.
#[derive(Debug)]
struct ServerGuard {
    root: PathBuf,
    record: PidRecord,
}

impl ServerGuard {
    /// Starts this run's moto (SQS) and dynalite (DynamoDB), side by side.
    async fn start_pair(
        tools: &Tools,
        root: &Path,
        variant: Variant,
    ) -> anyhow::Result<(Self, Self)> {
        let (venv, dir) = (tools.venv.clone(), root.to_path_buf());
        let moto = tokio::task::spawn_blocking(move || {
            let record =
                stand_in::Moto::start(&venv)?.detach(&server_record_name("moto", variant))?;
            Ok::<_, anyhow::Error>(Self { root: dir, record })
        });
        let (node, dir) = (tools.node.clone(), root.to_path_buf());
        let dynalite = tokio::task::spawn_blocking(move || {
            let record = stand_in::Dynalite::start(&node)?
                .detach(&server_record_name("dynalite", variant))?;
            Ok::<_, anyhow::Error>(Self { root: dir, record })
        });
        let moto = moto.await.context("the moto task failed")??;
        let dynalite = dynalite.await.context("the dynalite task failed")??;
        Ok((moto, dynalite))
    }

    fn endpoint(&self) -> anyhow::Result<String> {
        self.record
            .endpoint
            .clone()
            .with_context(|| format!("the {} record has no endpoint", self.record.name))
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        match self.record.stop(Duration::from_secs(5)) {
            Ok(_) => {
                let _ = std::fs::remove_file(self.record.path(&self.root));
                if let Some(log) = &self.record.log {
                    let _ = std::fs::remove_file(log);
                }
            }
            Err(e) => eprintln!(
                "cannot stop {} (pid {}): {e:#}",
                self.record.name, self.record.pid
            ),
        }
    }
}

/// The pid-file name of a demo server (`moto`, `dynalite`) of this process.
pub fn server_record_name(server: &str, variant: Variant) -> String {
    format!(
        "{PID_PREFIX}{}-{server}-{}",
        std::process::id(),
        variant.name()
    )
}

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
        ("CACHE_TTL_SECS", t.cache_ttl_secs.to_string()),
        ("PROPAGATION_SLACK_SECS", t.slack_secs.to_string()),
        ("FANOUT_COOLDOWN_SECS", t.cooldown_secs.to_string()),
        ("FANOUT_JITTER_SECS", t.jitter_secs.to_string()),
        ("RETRY_MAX_ATTEMPTS", t.retry_max_attempts.to_string()),
        ("MAX_INFLIGHT", t.max_inflight.to_string()),
        // Raising ahead of throttles at a tenth of a key's limit, as the default (100 of
        // 1,000 WCU/s) does in AWS, scaled to the demo's per-key limit.
        ("RAISE_AHEAD_WCU", (scenario.key_wcu / 10.0).to_string()),
    ] {
        env.set(k, v);
    }
    match variant {
        Variant::Naive => {
            env.set("SHARD_STRATEGY", "unsharded");
            env.set("FANOUT_MAX", "1");
        }
        Variant::Adaptive => {
            // The bucket is the template's default (hour).
            env.set("SHARD_STRATEGY", "time-bucket");
            env.set("SHARDS", plan.table_shards.to_string());
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

/// Items in `table`, and distinct readings among them (by device and sort key).
async fn stored(dynamo: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<(u64, u64)> {
    let items = store::read::scan_items(
        dynamo
            .scan()
            .table_name(table)
            .projection_expression("device_id, SK"),
    )
    .await
    .with_context(|| format!("cannot scan {table}"))?;
    let readings: std::collections::HashSet<(&String, &String)> = items
        .iter()
        .filter_map(|item| match (item.get("device_id"), item.get("SK")) {
            (
                Some(aws_sdk_dynamodb::types::AttributeValue::S(device)),
                Some(aws_sdk_dynamodb::types::AttributeValue::S(sk)),
            ) => Some((device, sk)),
            _ => None,
        })
        .collect();
    Ok((items.len() as u64, readings.len() as u64))
}

/// Messages received but not settled by a finished invocation.
fn unsettled(stats: &Stats) -> u64 {
    stats.messages.saturating_sub(
        stats.written_messages
            + stats.dead_lettered
            + stats.failures_reported
            + stats.requeued
            + stats.split,
    )
}

fn progress_line(variant: Variant, t: Duration, runner: &Stats, proxy: &StatsSnapshot) -> String {
    format!(
        "  [{}] t={:>4.0}s  messages received {:>7}  readings written {:>8}  throttled {:>7}  fan-out raises {}",
        variant.name(),
        t.as_secs_f64(),
        runner.messages,
        runner.readings_written,
        proxy.throttled_by_reason.values().sum::<u64>(),
        runner.fanout_raises,
    )
}

/// What the report calls `variant`'s layout.
fn layout_label(variant: Variant, planned_k: Option<u32>, plan: &CapacityPlan) -> String {
    match (variant, planned_k) {
        (Variant::Naive, _) => "unsharded: PK = device".to_owned(),
        (Variant::Adaptive, Some(k)) => format!(
            "time-bucket (hour), N = {}, hot device k = {k} planned, raised on heat",
            plan.table_shards
        ),
        (Variant::Adaptive, None) => format!(
            "time-bucket (hour), N = {}, fan-out k from 1, raised on heat",
            plan.table_shards
        ),
    }
}

/// One run's publishing and draining, with a progress line every 5 s.
struct Watch<'a> {
    scenario: &'a Scenario,
    variant: Variant,
    running: &'a run_local::Running,
    proxy: &'a capacity_proxy::ProxyHandle,
    t0: Instant,
}

impl Watch<'_> {
    fn say_progress(&self, stats: &Stats) {
        self.scenario.say(progress_line(
            self.variant,
            self.t0.elapsed(),
            stats,
            &self.proxy.stats(),
        ));
    }

    /// Publishes the scenario's plan to `queue_url` from `start` on.
    async fn publish(
        &self,
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
        start: sharding::time::Timestamp,
    ) -> anyhow::Result<Summary> {
        let hidden = ProgressBar::hidden();
        let publishing = publish::publish(
            sqs,
            queue_url,
            self.scenario.plan(0),
            start,
            SendOptions::default(),
            &hidden,
            None,
        );
        tokio::pin!(publishing);
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        tick.tick().await;
        let sent = loop {
            tokio::select! {
                sent = &mut publishing => break sent?,
                _ = tick.tick() => self.say_progress(&self.running.stats()),
            }
        };
        self.scenario.say(format!(
            "  [{}] published: {}",
            self.variant.name(),
            sent.text().replace('\n', "; ")
        ));
        Ok(sent)
    }

    /// Waits until nothing is visible and no invocation holds messages (what is left
    /// then waits out the visibility timeout), at most the scenario's drain time;
    /// returns how long it waited and whether the queue emptied.
    async fn drain(
        &self,
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
    ) -> anyhow::Result<(Duration, bool)> {
        let drain_start = Instant::now();
        let mut last_say = Instant::now();
        while drain_start.elapsed() < self.scenario.drain {
            let (visible, invisible) = run_local::queue_counts(sqs, queue_url).await?;
            let stats = self.running.stats();
            if visible == 0 && unsettled(&stats) == 0 {
                return Ok((drain_start.elapsed(), invisible == 0));
            }
            if last_say.elapsed() >= Duration::from_secs(5) {
                self.say_progress(&stats);
                last_say = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok((drain_start.elapsed(), false))
    }
}

/// The range reads through the API at `query_addr`: the hot device and the fleet's
/// busiest over the scenario's query window, and the hot device's fan-out epochs.
async fn read_back(
    scenario: &Scenario,
    query_addr: std::net::SocketAddr,
    start: sharding::time::Timestamp,
) -> anyhow::Result<(QueryResult, QueryResult, Vec<FanoutEpoch>)> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .context("cannot build the HTTP client")?;
    let base = format!("http://{query_addr}");
    let quarter = scenario.duration / 4;
    let from_ms = start.as_millis() + i64::try_from(quarter.as_millis()).unwrap_or(0);
    let to_ms = from_ms + i64::try_from(scenario.query_window.as_millis()).unwrap_or(0);
    let hot_query = read_range(
        &http,
        &format!("{base}/devices/{}/readings", scenario.hot_device),
        format!("{} readings", scenario.hot_device),
        from_ms,
        to_ms,
    )
    .await?;
    // The fleet's busiest device over the same range, for contrast with the hot one.
    let fleet_query = read_range(
        &http,
        &format!("{base}/devices/{FLEET_DEVICE}/readings"),
        format!("{FLEET_DEVICE} readings"),
        from_ms,
        to_ms,
    )
    .await?;
    let fanout = fanout_epochs(&http, &base, &scenario.hot_device).await?;
    Ok((hot_query, fleet_query, fanout))
}

/// Items throttled on `table` before and after the hot device's fan-out first grew
/// (`None` when it never did); heat rows count seconds from `proxy_origin_ms`.
fn throttles_around_first_raise(
    fanout: &[FanoutEpoch],
    rows: &[heatmap::HeatRow],
    table: &str,
    proxy_origin_ms: i64,
) -> (Option<u64>, Option<u64>) {
    let Some(first_raise) = fanout
        .iter()
        .filter(|e| e.k > 1)
        .filter_map(|e| sharding::time::Timestamp::parse(&e.effective_from).ok())
        .map(|ts| ts.as_millis())
        .min()
    else {
        return (None, None);
    };
    let second = u64::try_from((first_raise - proxy_origin_ms).max(0) / 1000).unwrap_or(0);
    let (mut before, mut after) = (0, 0);
    for r in rows.iter().filter(|r| r.table == table) {
        if r.second < second {
            before += r.throttled_items;
        } else {
            after += r.throttled_items;
        }
    }
    (Some(before), Some(after))
}

async fn run_variant(
    scenario: &Scenario,
    plan: &CapacityPlan,
    tools: &Tools,
    variant: Variant,
) -> anyhow::Result<RunReport> {
    let planned_k = (variant == Variant::Adaptive && scenario.planned_fanout)
        .then_some(plan.hot_entity_fanout)
        .filter(|&k| k > 1);
    let layout = layout_label(variant, planned_k, plan);
    scenario.say(format!("== run {}: {layout}", variant.name()));
    let (moto, dynalite) = ServerGuard::start_pair(tools, &scenario.root, variant).await?;
    let (moto_url, dynalite_url) = (moto.endpoint()?, dynalite.endpoint()?);
    let prefix = format!("demo-{}-{}", std::process::id(), variant.name());
    let template = scenario.root.join("template.yaml");
    // The queues on moto, the tables (same names) on dynalite.
    let stack = stand_in::provision(&moto_url, &template, &prefix).await?;
    stand_in::provision_tables(
        &dynalite_url,
        &template,
        &prefix,
        stand_in::Backend::Dynalite,
    )
    .await?;

    let heat_csv = scenario
        .out_dir
        .join(format!("heat-{}.csv", variant.name()));
    let mut config = ProxyConfig::forward(&dynalite_url)?;
    config.limits.key_wcu = scenario.key_wcu;
    config.heat_csv = Some(heat_csv.clone());
    // The heat CSV counts seconds from the proxy clock's origin; keep its wall time.
    let proxy_origin_ms = store::clock::wall_clock()?.as_millis();
    config.clock = Arc::new(MonotonicClock::new());
    let proxy = Proxy::start(config).await?;

    let mut env = ingest_env(scenario, plan, &stack, variant);
    env.set("AWS_ENDPOINT_URL_SQS", &moto_url);
    let mut settings = Settings::new(&stack.queue_url);
    settings.batching_window = scenario.batching_window;
    settings.batch_size = scenario.batch_size;
    settings.max_concurrency = scenario.max_concurrency;
    let running = run_local::start(settings, &env, Some(&proxy.url())).await?;
    let query_addr = running.query_addr().context("the query API is not up")?;

    if let Some(k) = planned_k {
        schedule_hot_fanout(scenario, variant, &env, &proxy.url(), k).await?;
    }

    // The devices talk to SQS itself, not through the DynamoDB emulator.
    let sqs = aws_sdk_sqs::Client::new(&stand_in::sdk_config(&moto_url).await);
    let watch = Watch {
        scenario,
        variant,
        running: &running,
        proxy: &proxy,
        t0: Instant::now(),
    };
    let start = store::clock::wall_clock()?;
    let sent = watch.publish(&sqs, &stack.queue_url, start).await?;
    let (drain, drained) = watch.drain(&sqs, &stack.queue_url).await?;
    let (hot_query, fleet_query, fanout) = read_back(scenario, query_addr, start).await?;

    running.stop();
    let runner = running.wait().await?;
    let proxy_stats = proxy.stats();
    proxy
        .shutdown()
        .await
        .map_err(|e| anyhow!("stopping capacity-proxy: {e}"))?;

    let (queued_visible, queued_invisible) =
        run_local::queue_counts(&sqs, &stack.queue_url).await?;
    // Read back, not counted: a message can be dead-lettered twice (SQS delivers at
    // least once, and moto can hand one message to two concurrent receives), and the
    // promise is about which messages reach the DLQ, each with its reason.
    let letters = run_local::drain_dlq(&sqs, &stack.dlq_url).await?;
    // A message without a source id (moved by the redrive, not sent by the handler)
    // counts on its own.
    let dlq_sources: std::collections::BTreeSet<&str> =
        letters.iter().filter_map(|l| l.source.as_deref()).collect();
    let unsourced = letters.iter().filter(|l| l.source.is_none()).count();
    let dynamo = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&dynalite_url).await);
    let (items, written) = stored(&dynamo, &stack.table_name).await?;
    drop((moto, dynalite));

    let text = std::fs::read_to_string(&heat_csv)
        .with_context(|| format!("cannot read {}", heat_csv.display()))?;
    let rows = heatmap::HeatRow::parse_csv(&text)?;
    let heatmap_path = scenario
        .out_dir
        .join(format!("heat-{}.png", variant.name()));
    let grid = heatmap::grid(&rows, 40)?;
    heatmap::render_png(&grid, scenario.key_wcu, &heatmap_path)?;
    let (throttles_before_raise, throttles_after_raise) =
        throttles_around_first_raise(&fanout, &rows, &stack.table_name, proxy_origin_ms);

    let report = RunReport {
        variant,
        layout,
        sent,
        written,
        stored_twice: items - written,
        runner,
        proxy: proxy_stats,
        dlq: (dlq_sources.len() + unsourced) as u64,
        dlq_copies: letters.len() as u64,
        queued_visible,
        queued_invisible,
        drain,
        drained,
        hot_query,
        fleet_query,
        fanout,
        throttles_after_raise,
        throttles_before_raise,
        heatmap: heatmap_path,
        heat_csv,
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

#[derive(Debug, Deserialize)]
struct Page {
    items: Vec<serde_json::Value>,
    next_cursor: Option<String>,
}

/// Reads `[from_ms, to_ms)` page by page, timing the whole read.
async fn read_range(
    http: &reqwest::Client,
    url: &str,
    what: String,
    from_ms: i64,
    to_ms: i64,
) -> anyhow::Result<QueryResult> {
    let started = Instant::now();
    let (mut items, mut pages) = (0u64, 0u64);
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![
            ("from", from_ms.to_string()),
            ("to", to_ms.to_string()),
            ("limit", PAGE_LIMIT.to_string()),
        ];
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let response = http
            .get(url)
            .query(&query)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        pages += 1;
        let status = response.status();
        let body = response
            .text()
            .await
            .with_context(|| format!("GET {url}"))?;
        if !status.is_success() {
            return Ok(QueryResult {
                what,
                items,
                pages,
                elapsed: started.elapsed(),
                refused: Some(format!("{} {}", status.as_u16(), one_line(&body))),
            });
        }
        let page: Page =
            serde_json::from_str(&body).with_context(|| format!("GET {url}: not a page"))?;
        items += page.items.len() as u64;
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    Ok(QueryResult {
        what,
        items,
        pages,
        elapsed: started.elapsed(),
        refused: None,
    })
}

fn one_line(body: &str) -> String {
    let error: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let text = error
        .as_ref()
        .and_then(|v| v.get("error").or(Some(v)))
        .map_or_else(|| body.to_owned(), |v| v.to_string());
    text.chars().take(120).collect()
}

async fn fanout_epochs(
    http: &reqwest::Client,
    base: &str,
    device: &str,
) -> anyhow::Result<Vec<FanoutEpoch>> {
    #[derive(Deserialize)]
    struct Shards {
        fanout: Vec<FanoutEpoch>,
    }
    let url = format!("{base}/devices/{device}/shards");
    let response = http
        .get(&url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .with_context(|| format!("GET {url}"))?;
    if !status.is_success() {
        bail!("GET {url}: {status} {}", one_line(&body));
    }
    let shards: Shards =
        serde_json::from_str(&body).with_context(|| format!("GET {url}: unexpected body"))?;
    Ok(shards.fanout)
}

fn ms(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v} ms"))
}

/// The side-by-side report.
pub fn report_text(report: &DemoReport) -> String {
    let mut s = report_heading(report);
    s.push_str(&side_by_side(&report_rows(report)));
    s.push_str(&report_footer(report));
    s
}

/// The report's first line: the scenario.
fn report_heading(report: &DemoReport) -> String {
    format!(
        "Shardline demo: {} Zipf devices at {} readings/s + {} at {} readings/s for {} s, {}% malformed; per-key limit {} WCU/s\n\n",
        report.scenario.devices,
        report.scenario.fleet_rate,
        report.scenario.hot_device,
        report.scenario.hot_rate,
        report.scenario.duration.as_secs_f64(),
        report.scenario.bad_rate * 100.0,
        report.scenario.key_wcu,
    )
}

/// The report's rows: a label, then the naive run's cell and the adaptive run's.
fn report_rows(report: &DemoReport) -> Vec<(String, String, String)> {
    let (a, b) = (&report.naive, &report.adaptive);
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&RunReport) -> String| {
        rows.push((label.to_owned(), f(a), f(b)));
    };
    row("layout", &|r| r.layout.clone());
    row("readings sent (valid)", &|r| {
        r.sent.sent.readings.to_string()
    });
    row("malformed messages sent", &|r| {
        r.sent.sent.malformed_total().to_string()
    });
    row("readings written (distinct in table)", &|r| {
        r.written.to_string()
    });
    row("  stored twice (one sort key)", &|r| {
        r.stored_twice.to_string()
    });
    row("  not (yet) written", &|r| {
        r.sent.sent.readings.saturating_sub(r.written).to_string()
    });
    row("throttled items (proxy)", &|r| r.throttled().to_string());
    let mut reasons: Vec<&String> = a
        .proxy
        .throttled_by_reason
        .keys()
        .chain(b.proxy.throttled_by_reason.keys())
        .collect();
    reasons.sort();
    reasons.dedup();
    for reason in reasons {
        rows.push((
            format!("  {reason}"),
            a.proxy
                .throttled_by_reason
                .get(reason)
                .copied()
                .unwrap_or(0)
                .to_string(),
            b.proxy
                .throttled_by_reason
                .get(reason)
                .copied()
                .unwrap_or(0)
                .to_string(),
        ));
    }
    let mut row = |label: &str, f: &dyn Fn(&RunReport) -> String| {
        rows.push((label.to_owned(), f(a), f(b)));
    };
    row("write calls retried", &|r| {
        r.runner.write_retries.to_string()
    });
    row("items returned unprocessed", &|r| {
        r.runner.unprocessed_items.to_string()
    });
    row("messages reported for redelivery", &|r| {
        r.runner.failures_reported.to_string()
    });
    row("sent to the DLQ (messages in DLQ)", &|r| {
        if r.dlq_copies > r.dlq {
            format!("{} ({} copies)", r.dlq, r.dlq_copies)
        } else {
            r.dlq.to_string()
        }
    });
    row("fan-out raises", &|r| r.runner.fanout_raises.to_string());
    row("hot device fan-out epochs", &|r| {
        if r.fanout.is_empty() {
            "-".to_owned()
        } else {
            r.fanout
                .iter()
                .map(|e| format!("k={} from {}", e.k, short_time(&e.effective_from)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    });
    row("still queued (visible / in flight)", &|r| {
        format!("{} / {}", r.queued_visible, r.queued_invisible)
    });
    row("drain after publishing", &|r| {
        if r.drained {
            format!("emptied in {:.1} s", r.drain.as_secs_f64())
        } else {
            format!(
                "stopped after {:.1} s (the rest waits out the 185 s visibility timeout)",
                r.drain.as_secs_f64()
            )
        }
    });
    row("write lag p50 / p99", &|r| {
        format!(
            "{} / {}",
            ms(r.runner.write_lag_p50_ms),
            ms(r.runner.write_lag_p99_ms)
        )
    });
    let window = format!(
        "{} s from t+{} s",
        report.scenario.query_window.as_secs_f64(),
        (report.scenario.duration / 4).as_secs_f64()
    );
    row(&format!("query: hot device, {window}"), &|r| {
        r.hot_query.cell()
    });
    row(&format!("query: {FLEET_DEVICE}, {window}"), &|r| {
        r.fleet_query.cell()
    });
    row("throttles before the hot fan-out first grew", &|r| {
        r.throttles_before_raise
            .map_or_else(|| "-".to_owned(), |n| n.to_string())
    });
    row("throttles after it", &|r| {
        r.throttles_after_raise
            .map_or_else(|| "-".to_owned(), |n| n.to_string())
    });
    row("heatmap", &|r| r.heatmap.display().to_string());
    rows
}

/// `rows` as two columns side by side under the runs' names, long cells wrapped
/// within their column.
fn side_by_side(rows: &[(String, String, String)]) -> String {
    let w0 = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let w1 = rows
        .iter()
        .map(|r| r.1.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(20, CELL_WIDTH);
    let mut s = String::new();
    s.push_str(&format!(
        "{:<w0$}  {:<w1$}  {}\n",
        "", "(1) naive", "(2) adaptive hybrid"
    ));
    for (label, x, y) in rows {
        // Long cells wrap within their column, so the two runs stay side by side.
        let (x, y) = (wrap(x, w1), wrap(y, CELL_WIDTH));
        for line in 0..x.len().max(y.len()) {
            let label = if line == 0 { label.as_str() } else { "" };
            let x = x.get(line).map_or("", String::as_str);
            let y = y.get(line).map_or("", String::as_str);
            s.push_str(format!("{label:<w0$}  {x:<w1$}  {y}").trim_end());
            s.push('\n');
        }
    }
    s
}

/// The notes under the table: what the rows mean, where the heatmaps are, how long
/// it took.
fn report_footer(report: &DemoReport) -> String {
    let (a, b) = (&report.naive, &report.adaptive);
    format!(
        "\nThe hot fan-out first grows with the ingest's first raise (or, with --planned, the planned k), \
         in force at once: readings not yet written, the backlog included, take the new k. Throttles \
         after that: the fan-out was still too small (it is raised again after the cooldown, to what \
         the measured rate needs), or a writer's first throttle on a key the raise already replaced \
         (it re-reads the fan-out and re-keys what it has not written).\n\
         Query times are dynalite's through capacity-proxy: dynalite keeps each partition's items \
         in key order, so a Query reads one key's range, as DynamoDB does (moto, which serves the \
         queues, would scan the whole table for each Query).\n\
         Heatmaps (rows = partition keys, columns = seconds, red = over {} WCU/s or throttled):\n  {}\n  {}\n\
         Heat CSVs: {}, {}\nBoth runs took {:.0} s.",
        report.scenario.key_wcu,
        a.heatmap.display(),
        b.heatmap.display(),
        a.heat_csv.display(),
        b.heat_csv.display(),
        report.elapsed.as_secs_f64()
    )
}

/// Widest a report cell prints before it wraps.
const CELL_WIDTH: usize = 44;

/// `text` in lines of at most `width` characters, broken at spaces (a longer word, such
/// as a path, keeps a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// `2026-06-22T01:05:07.123Z` -> `01:05:07.123`.
fn short_time(rfc3339: &str) -> &str {
    rfc3339
        .split_once('T')
        .map_or(rfc3339, |(_, t)| t.trim_end_matches('Z'))
}

/// The command: runs the demo (stopping everything on Ctrl-C or SIGTERM), prints the
/// report and writes it to `<out-dir>/report.txt`.
pub async fn run_command(args: &DemoArgs) -> anyhow::Result<()> {
    let root = stand_in::repo_root()?;
    let scenario = args.scenario(&root)?;
    let report = tokio::select! {
        report = run(&scenario) => report?,
        () = wait_for_signal() => {
            // Dropping the demo's future stops the runner and proxy and stops its servers.
            bail!("interrupted: every process of the demo was stopped");
        }
    };
    let text = report_text(&report);
    let path = scenario.out_dir.join("report.txt");
    std::fs::write(&path, format!("{text}\n"))
        .with_context(|| format!("cannot write {}", path.display()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    writeln!(out, "Report written to {}", path.display())?;
    writeln!(
        out,
        "Logs of the handler and the runner: {}",
        args.log_path(&root).display()
    )?;
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    // No SIGTERM handler (or not unix): Ctrl-C only.
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_wrap_at_spaces_within_their_width() {
        assert_eq!(
            wrap("stopped after 20.3 s (the rest waits out the timeout)", 20),
            [
                "stopped after 20.3 s",
                "(the rest waits out",
                "the timeout)"
            ]
        );
        assert_eq!(wrap("short", 20), ["short"]);
        assert_eq!(wrap("", 20), [""]);
        // A word longer than the width keeps a line of its own, unbroken.
        assert_eq!(
            wrap("at /a/very/long/path/to/heat.png now", 10),
            ["at", "/a/very/long/path/to/heat.png", "now"]
        );
    }
}
