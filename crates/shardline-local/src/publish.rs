//! `shardline-local publish`: the device simulator.
//!
//! [`generate`] builds the message stream from a seed (pure, testable without AWS);
//! [`send`] paces it into SQS. [`run`] is the command: flags in, summary out.

pub mod generate;
pub mod send;
pub mod waveform;

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sharding::time::Timestamp;

pub use generate::{Content, Generator, Malformation, Message, Plan, ReadingId, Tally};
pub use send::{Manifest, ManifestLine, SendOptions, Summary, send_all};

use shardline::env::StackArgs;

/// Flags of `shardline-local publish`.
#[derive(Debug, Clone, Args)]
pub struct PublishArgs {
    /// The queue (default: QUEUE_URL from the environment or the env file).
    #[arg(long)]
    pub queue_url: Option<String>,
    #[command(flatten)]
    pub stack: StackArgs,
    /// Devices in the fleet; each reading picks one Zipf-distributed.
    #[arg(long, default_value_t = 100)]
    pub devices: u32,
    /// Readings per second of the whole fleet.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// How long to send, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// A hot device sending --hot-rate readings/s on top of the fleet.
    #[arg(long)]
    pub hot_device: Option<String>,
    /// Readings per second of the hot device.
    #[arg(long, default_value_t = 0.0)]
    pub hot_rate: f64,
    /// Each reading's ts lies up to this many milliseconds before its send slot.
    #[arg(long, default_value_t = 0)]
    pub jitter_ms: u64,
    /// Readings per message (1 = single-reading bodies, more = {"readings":[...]}).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Fraction of messages that are malformed (several kinds, each counted).
    #[arg(long, default_value_t = 0.0)]
    pub bad_rate: f64,
    /// Seed of device choice, event ids, metrics and malformations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Zipf exponent of device popularity in the fleet.
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Stop after this many messages.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// SendMessageBatch calls in flight at most.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Write a JSONL manifest of every accepted reading and malformed message here.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl PublishArgs {
    /// The generation plan of these flags.
    pub fn plan(&self) -> anyhow::Result<Plan> {
        if !(self.duration.is_finite() && self.duration >= 0.0) {
            return Err(anyhow!(
                "--duration must be a non-negative number of seconds"
            ));
        }
        let plan = Plan {
            devices: self.devices,
            rate: self.rate,
            duration: Duration::from_secs_f64(self.duration),
            hot_device: self.hot_device.clone(),
            hot_rate: self.hot_rate,
            jitter: Duration::from_millis(self.jitter_ms),
            batch: self.batch,
            bad_rate: self.bad_rate,
            seed: self.seed,
            max_messages: self.max_messages,
            zipf_exponent: self.zipf,
        };
        plan.validate().map_err(|e| anyhow!(e))?;
        Ok(plan)
    }
}

/// Publishes with the given client: generation from `start`, pacing, manifest.
/// The progress bar is the caller's (hidden in tests).
pub async fn publish(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    plan: Plan,
    start: Timestamp,
    options: SendOptions,
    progress: &ProgressBar,
    manifest: Option<&mut (dyn std::io::Write + Send)>,
) -> anyhow::Result<Summary> {
    let generator = Generator::new(plan, start).map_err(|e| anyhow!(e))?;
    send_all(client, queue_url, generator, options, progress, manifest).await
}

/// The command: reads the environment, publishes, prints the summary.
pub async fn run(args: &PublishArgs) -> anyhow::Result<()> {
    let plan = args.plan()?;
    let env = args.stack.env()?;
    let queue_url = match &args.queue_url {
        Some(url) => url.clone(),
        None => env.require("QUEUE_URL")?,
    };
    let sdk = args.stack.sdk_config(&env).await;
    let client = aws_sdk_sqs::Client::new(&sdk);
    let progress = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(plan.messages());
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} messages {per_sec} {msg}",
            )
            .context("invalid progress template")?
            .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut file = match &args.manifest {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => None,
    };
    let options = SendOptions {
        concurrency: args.concurrency.max(1),
        ..SendOptions::default()
    };
    let summary = publish(
        &client,
        &queue_url,
        plan,
        store::clock::wall_clock()?,
        options,
        &progress,
        file.as_mut().map(|f| f as &mut (dyn std::io::Write + Send)),
    )
    .await?;
    progress.finish_and_clear();
    if let Some(mut f) = file {
        f.flush().context("cannot write the manifest")?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary).context("cannot encode the summary")?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", summary.text())?;
        if let Some(path) = &args.manifest {
            writeln!(out, "manifest: {}", path.display())?;
        }
    }
    if summary.send_failures > 0 {
        return Err(anyhow!(
            "{} messages were not accepted by SQS",
            summary.send_failures
        ));
    }
    Ok(())
}
