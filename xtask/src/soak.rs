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
    /// Write capacity per partition key at the proxy, WCU/s (`shardline soak`'s default
    /// when absent); below the hot devices' rates their writes throttle.
    #[arg(long)]
    pub key_wcu: Option<f64>,
}

pub fn run(root: &Path, args: &SoakArgs) -> Result<()> {
    stand_in::ensure_venv(root)?;
    let bin = build_binary(root, "shardline", "shardline")?;
    let bin = bin.display().to_string();
    let mut soak_args = vec![
        "soak".to_owned(),
        "--messages".to_owned(),
        args.messages.to_string(),
        "--kills".to_owned(),
        args.kills.to_string(),
        "--seed".to_owned(),
        args.seed.to_string(),
    ];
    if let Some(key_wcu) = args.key_wcu {
        soak_args.extend(["--key-wcu".to_owned(), key_wcu.to_string()]);
    }
    let soak_args: Vec<&str> = soak_args.iter().map(String::as_str).collect();
    run_step("soak", root, &bin, &soak_args)
}
