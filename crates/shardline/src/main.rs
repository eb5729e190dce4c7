//! `shardline`: the Shardline command line. Each subcommand lives in its own module.

use clap::{Parser, Subcommand};

mod plan;

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
    Plan(plan::PlanArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => plan::run(&args),
    }
}
