//! What one soak does: the flags of `shardline-local soak`, the [`SoakConfig`] they set,
//! and the publisher's plan.

use std::path::PathBuf;
use std::time::Duration;

use capacity_proxy::Faults;
use clap::Args;

use crate::publish::Plan;

/// The hot device the publisher drives on its own schedule.
pub const HOT_DEVICE: &str = "hot-device-001";

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
    /// Readings per message (1 to 500): above 1, a message of the hot device is one
    /// device's readings, which the default layout writes as blocks.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=500))]
    pub batch: u16,
    /// Slab mode: `SLABS=on`, one reading a message from a fleet of
    /// [`SLAB_FLEET`] devices at [`SLAB_FLEET_RATE`] readings/s and no hot device
    /// (`--batch` is ignored).
    #[arg(long)]
    pub slabs: bool,
}

/// The devices of the slab-mode fleet: each sends about one reading a batch, so its
/// share of a batch fills no write unit and goes to a slab.
pub const SLAB_FLEET: u32 = 300;

/// Readings per second of the slab-mode fleet: low enough that the runner keeps up
/// through the proxy's faults and a kill's redeliveries come back within
/// `SLAB_ACCEPT_SECS` of their timestamps (the visibility timeout, 12 s, and a restart).
pub const SLAB_FLEET_RATE: f64 = 20.0;

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
    /// Readings per second the fleet publishes (messages, with one reading each), on
    /// top of `hot_rate`.
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
    /// Readings per message.
    pub batch: usize,
    /// Slab mode ([`SoakConfig::in_slab_mode`]): the table's layout writes slabs, the
    /// fleet is many one-reading devices, the sealer runs every few seconds.
    pub slabs: bool,
}

impl SoakConfig {
    /// The proxy's per-key write capacity. The publisher's achieved rate is bounded by
    /// moto's SQS (tens of messages per second, the hot device a few readings/s), so the
    /// limit is scaled down with it: at 4 WCU/s the hot devices' keys throttle (thousands
    /// of key-range throttles in a 2,000-message run) and their fan-out grows, as a
    /// device past 1,000 WCU/s would in AWS. `--key-wcu 200` runs without throttles.
    pub const KEY_WCU: f64 = 4.0;

    /// The standard soak's faults: 30% unprocessed, 5% HTTP 500, 10 ms latency.
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
            batch: 1,
            slabs: false,
        }
    }

    /// The soak in slab mode: `SLABS=on` (its sealer told the ingest's timeout), one
    /// reading a message from [`SLAB_FLEET`] devices at [`SLAB_FLEET_RATE`] readings/s,
    /// no hot device.
    #[must_use]
    pub fn in_slab_mode(mut self) -> Self {
        self.slabs = true;
        self.batch = 1;
        self.fleet_rate = SLAB_FLEET_RATE;
        self.hot_rate = 0.0;
        self
    }

    /// The devices the reader pages while the soak runs: the hot device and the fleet's
    /// top devices, or in slab mode a few of its evenly used fleet.
    pub(super) fn read_devices(&self) -> Vec<String> {
        if self.slabs {
            (0..8).map(fleet_device).collect()
        } else {
            let mut devices = vec![HOT_DEVICE.to_owned()];
            devices.extend((0..3).map(fleet_device));
            devices
        }
    }
}

/// The name the publisher gives the fleet's device of rank `rank`.
fn fleet_device(rank: u32) -> String {
    format!("dev-{rank:05}")
}

/// How long the publisher's schedule takes to send `cfg.messages` at the soak's rates.
/// moto's SQS often holds the publisher back, so it can take longer on the clock: the
/// kill moments are drawn on this schedule and follow the publisher's progress along it.
pub(super) fn publishing_period(cfg: &SoakConfig) -> Duration {
    // The rates are of readings; a message carries `batch` of them.
    let messages_per_sec = (cfg.fleet_rate + cfg.hot_rate) / cfg.batch.max(1) as f64;
    Duration::from_secs_f64((cfg.messages as f64 / messages_per_sec).max(0.1))
}

/// The publisher's plan: about `messages` messages, 2% malformed, a Zipf fleet (its
/// top devices are hot) and one hot device on its own schedule; in slab mode a fleet of
/// [`SLAB_FLEET`] devices used evenly and no hot device.
pub fn soak_plan(cfg: &SoakConfig) -> Plan {
    Plan {
        devices: if cfg.slabs { SLAB_FLEET } else { 50 },
        rate: cfg.fleet_rate,
        // A little long, so max_messages is what cuts the stream.
        duration: Duration::from_secs_f64(publishing_period(cfg).as_secs_f64() * 1.05 + 0.1),
        hot_device: (!cfg.slabs).then(|| HOT_DEVICE.to_owned()),
        hot_rate: cfg.hot_rate,
        jitter: Duration::from_millis(50),
        batch: cfg.batch.max(1),
        bad_rate: 0.02,
        seed: cfg.seed,
        max_messages: Some(cfg.messages),
        zipf_exponent: if cfg.slabs { 0.0 } else { 1.2 },
    }
}
