//! `shardline fanout`: schedule a known-hot device's fan-out ahead of its load.
//!
//! The ingest raises a device's fan-out when its writes throttle (or when one batch
//! already shows it near a key's limit), and a raise takes effect only after the
//! propagation margin: a device that is hot from its first reading is throttled until
//! then. When the load is known in advance (a launch, a firmware push, the planner's
//! hot-entity k), the operator schedules that k here, through the same shard directory
//! and conditional update as the ingest's raises, and starts the load once it is in
//! force.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;
use sharding::key::validate_id;
use store::clock::wall_clock;
use store::config::{Vars, WriterSettings};
use store::directory::{PlannedFanout, ShardDirectory};
use store::dynamo::DynamoShards;

use crate::env::{EnvLookup, StackArgs};

/// Flags of `shardline fanout`.
#[derive(Debug, Args)]
pub struct FanoutArgs {
    /// The device whose load is coming.
    #[arg(long)]
    pub device: String,
    /// Its fan-out: partition keys per time bucket (`shardline plan` prints the
    /// hot-entity k for a rate).
    #[arg(long)]
    pub k: u32,
    /// The stack; the env file's margin and FANOUT_MAX apply, so the schedule is the
    /// one the writers follow.
    #[command(flatten)]
    pub stack: StackArgs,
}

/// Schedules fan-out `k` for `device` in the shard table the writers' settings in
/// `env` name ([`WriterSettings`]), through `endpoint` (or `AWS_ENDPOINT_URL`).
pub async fn schedule(
    env: &EnvLookup,
    endpoint: Option<&str>,
    device: &str,
    k: u32,
) -> anyhow::Result<PlannedFanout> {
    validate_id("device_id", device).with_context(|| format!("bad --device {device:?}"))?;
    let settings = WriterSettings::parse(&Vars(|name: &str| env.get(name)))
        .context("the writers' shard settings")?;
    let dynamo = aws_sdk_dynamodb::Client::new(&env.sdk_config(endpoint).await);
    let directory = ShardDirectory::new(
        DynamoShards::new(&dynamo, &settings.shard_table_name),
        settings.directory,
    );
    Ok(directory.plan_fanout(device, k, wall_clock()?).await?)
}

/// What a schedule did, in one line.
pub fn describe(device: &str, planned: &PlannedFanout) -> String {
    match planned {
        PlannedFanout::Scheduled(raise) => format!(
            "{device}: fan-out {} -> {} from {}",
            raise.from, raise.to, raise.effective_from
        ),
        PlannedFanout::Already { k } => {
            format!("{device}: fan-out already {k}, nothing scheduled")
        }
    }
}

/// Runs the command and prints what it scheduled.
pub async fn run(args: &FanoutArgs) -> anyhow::Result<()> {
    if args.k == 0 {
        anyhow::bail!("--k must be at least 1");
    }
    let env = args.stack.env()?;
    let planned = schedule(
        &env,
        args.stack.endpoint_url.as_deref(),
        &args.device,
        args.k,
    )
    .await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", describe(&args.device, &planned)).context("cannot write to stdout")?;
    Ok(())
}
