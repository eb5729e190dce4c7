//! What one demo runs: the [`Scenario`] (fleet, hot device, per-key limit, durations,
//! the ingest's and the runner's settings), the publisher's plan and the planner's
//! answer derived from it, and the settings block printed before the runs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use sharding::capacity::{CapacityPlan, DEFAULT_SAFETY, PlanInput, plan_capacity};
use sharding::layout::SubShards;

use crate::publish::{Generator, Plan};

/// Readings table item bytes beyond the message body (key attributes and names).
const ITEM_OVERHEAD_BYTES: u64 = 120;

/// The ingest settings the demo passes (the production fan-out defaults unless changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestTuning {
    /// `MAX_FUTURE_SECS`.
    pub max_future_secs: u64,
    /// `SHARD_CACHE_TTL_SECS`.
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
    /// `BLOCKS` of the adaptive run: one device's readings packed into blocks (a new
    /// table's default), or an item a reading (a table created before blocks).
    pub blocks: bool,
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
    /// How long the one-reading fleet publishes (`one_reading`); none leaves the phase
    /// out.
    pub one_reading: Option<Duration>,
}

impl Scenario {
    /// An error naming the flag unless the scenario can run.
    pub(super) fn validate(&self) -> anyhow::Result<()> {
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

    /// The ingest's `RAISE_AHEAD_WCU`: a tenth of the per-key limit, as the default (100
    /// of 1,000 WCU/s) is in AWS.
    pub fn raise_ahead_wcu(&self) -> f64 {
        self.key_wcu / 10.0
    }

    /// The planner's answer for the scaled rates, with the proxy's per-key limit and the
    /// ingest's placement (base, the default `SUB_SHARDS`) and raise-ahead share.
    pub fn capacity_plan(&self) -> anyhow::Result<CapacityPlan> {
        plan_capacity(&PlanInput {
            global_wps: self.fleet_rate + self.hot_rate,
            peak_entity_wps: self.hot_rate,
            item_bytes: self.item_bytes(),
            safety: DEFAULT_SAFETY,
            partition_wcu: self.key_wcu,
            table_shards: None,
            sub_shards: SubShards::Base,
            raise_ahead_wcu: self.raise_ahead_wcu(),
            // Planned as items of one reading, what the naive run writes: the adaptive
            // run's blocks only leave the keys more room.
            write_units_per_reading: None,
        })
        .context("cannot plan the table shards")
    }

    /// Prints a progress line on stderr, when verbose.
    pub(super) fn say(&self, line: impl AsRef<str>) {
        if self.verbose {
            eprintln!("{}", line.as_ref());
        }
    }
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
         N = {n} table shards, hot fan-out k = {k} expected (its sub-shards on base shards: each of its keys at \
         ~{mean:.0} of the table + ~{share:.0} of its own WCU/s).\n\
         Ingest settings of the demo (the production fan-out defaults are 300/60/5/2/1 s):\n  \
         MAX_FUTURE_SECS={mf} SHARD_CACHE_TTL_SECS={ttl} PROPAGATION_SLACK_SECS={slack} FANOUT_COOLDOWN_SECS={cd} FANOUT_JITTER_SECS={jit} \
         RETRY_MAX_ATTEMPTS={retries} MAX_INFLIGHT={inflight} RAISE_AHEAD_WCU={key_rate}\n  \
         Fan-out keys nest, so a raise is in force the moment it is decided: to the k the measured rate needs at \
         RAISE_AHEAD_WCU write units/s per key (a tenth of the per-key limit, as the default 100 of 1,000 is), or the next \
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
        mean = plan.mean_pk_wcu,
        share = plan.hot_share_wcu,
        mf = t.max_future_secs,
        ttl = t.cache_ttl_secs,
        slack = t.slack_secs,
        cd = t.cooldown_secs,
        jit = t.jitter_secs,
        retries = t.retry_max_attempts,
        inflight = t.max_inflight,
        margin = t.margin_secs(),
        key_rate = s.raise_ahead_wcu(),
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
