//! The flags of `shardline-local demo` and the [`Scenario`] they describe, checked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use clap::Args;

use super::{IngestTuning, Scenario};

/// The hot sensor of the reference scenario.
pub const HOT_DEVICE: &str = "sensor-alpha-001";
/// Where the demo writes heat CSVs, heatmaps and the report (under the repository root).
pub const DEFAULT_OUT_DIR: &str = ".local/demo";
/// The log file of a demo, in its output directory.
pub const LOG_FILE: &str = "demo.log";

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
    /// Readings per second of the hot device. The reference scenario's sensor sends
    /// 2,000/s against a 1,000 WCU/s key; the local stand-in on this 2-core machine stores
    /// well under 2,000 items/s, so the default keeps the ratio (hot = 2x the per-key
    /// limit) at a fifth of the rate.
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
    /// SHARD_CACHE_TTL_SECS of the ingest (the production default).
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
    /// Run 2 writes an item a reading (`BLOCKS=off`, a table created before blocks)
    /// instead of packing each device's readings into blocks (a new table's default,
    /// under which a hot device of a few times a key's limit in readings fits one key).
    #[arg(long)]
    pub no_blocks: bool,
    /// Seconds the one-reading fleet publishes, on today's layout and with slabs side
    /// by side, after the two runs; 0 leaves the phase out. Three minutes let the
    /// first slab windows close and be compacted, so the fleet's fresh minutes show.
    #[arg(long, default_value_t = 180.0)]
    pub one_reading_secs: f64,
}

impl DemoArgs {
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

    /// The scenario of these flags, relative to `root` (the repository root).
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
                blocks: !self.no_blocks,
            },
            batching_window: secs("batching-window", self.batching_window)?,
            batch_size: self.batch_size,
            max_concurrency: self.max_concurrency,
            verbose: true,
            one_reading: (self.one_reading_secs > 0.0)
                .then(|| secs("one-reading-secs", self.one_reading_secs))
                .transpose()?,
        };
        scenario.validate()?;
        Ok(scenario)
    }
}
