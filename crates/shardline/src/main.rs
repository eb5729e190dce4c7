//! `shardline`: the operator's command line for a deployed table. Each subcommand lives
//! in its own module (`plan` here, the others in the library so tests share them). The
//! local harness (publish, run-local, demo, soak, heatmap, provision) is the
//! `shardline-local` binary.

// The default credential chain with SSO makes `aws_config::load`'s future deeper than
// the default limit allows, where the commands' futures are laid out here.
#![recursion_limit = "256"]

use clap::{Parser, Subcommand};
use shardline::{audit, blocks, cost, fanout, seal, slabs};

mod capacity;

/// Shardline: high-velocity time-series ingestion into DynamoDB without hot partitions.
#[derive(Debug, Parser)]
#[command(name = "shardline", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Size the table-level shard count N and a hot entity's fan-out k from write rates.
    Plan(capacity::PlanArgs),
    /// Schedule a known-hot device's fan-out ahead of its load.
    Fanout(fanout::FanoutArgs),
    /// Audit partition keys of a write sample or a table: cardinality, shares, peaks.
    Audit(audit::AuditArgs),
    /// Turn blocks (many readings per write unit) on or off for an existing table.
    Blocks(blocks::BlocksArgs),
    /// Turn slabs (many one-reading devices a write unit) on or off for a table.
    Slabs(slabs::SlabsArgs),
    /// Rebuild a range of hours' derived items (rollups, directory) from the readings.
    Seal(seal::SealArgs),
    /// What a fleet costs on AWS a month, by service and line item, modelled from its
    /// shape (devices, rate, message size, door, layout, reads), at us-east-1's prices
    /// as recorded on 2026-11-29 (check them; --prices FILE overrides).
    Cost(cost::CostArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => capacity::run(&args),
        Command::Fanout(args) => runtime()?.block_on(fanout::run(&args)),
        Command::Audit(args) => runtime()?.block_on(audit::run(&args)),
        Command::Blocks(args) => runtime()?.block_on(blocks::run(&args)),
        Command::Slabs(args) => runtime()?.block_on(slabs::run(&args)),
        Command::Seal(args) => runtime()?.block_on(seal::run(&args)),
        Command::Cost(args) => cost::run(&args),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
