//! `cargo xtask soak`: builds the `shardline` binary and runs `shardline soak` (private
//! moto, capacity-proxy with 30% unprocessed items, 5% HTTP 500s and 10 ms latency,
//! run-local SIGKILLed and restarted, publisher, API reader), which prints the counts
//! and fails when a promise of RELIABILITY.md broke.

use std::path::Path;

use anyhow::Result;
use clap::Args;

use crate::steps::{build_binary, run_step};

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Messages to publish (2% malformed).
    #[arg(long, default_value_t = 10_000)]
    pub messages: u64,
    /// Times run-local is SIGKILLed and restarted.
    #[arg(long, default_value_t = 3)]
    pub kills: u32,
    /// Seed of the publisher, the kill moments, the faults and the reader.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(root: &Path, args: &SoakArgs) -> Result<()> {
    stand_in::ensure_venv(root)?;
    let bin = build_binary(root, "shardline", "shardline")?;
    let bin = bin.display().to_string();
    run_step(
        "soak",
        root,
        &bin,
        &[
            "soak",
            "--messages",
            &args.messages.to_string(),
            "--kills",
            &args.kills.to_string(),
            "--seed",
            &args.seed.to_string(),
        ],
    )
}
