//! `cargo xtask soak`: builds the `shardline-local` binary and runs `shardline-local soak` (private
//! moto for SQS and dynalite for DynamoDB, capacity-proxy in front of dynalite with 30%
//! unprocessed items, 5% HTTP 500s and 10 ms latency, run-local SIGKILLed and
//! restarted, publisher, API reader), which prints the counts and what became of each
//! message, and fails when a promise of docs/reliability.md broke. Its flags are
//! `shardline-local soak`'s.

use std::path::Path;

use anyhow::Result;
use clap::Args;

use crate::steps::{Profile, build_binary, run_step};

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// `shardline-local soak` flags, passed as they are (`--messages`, `--kills`, `--seed`,
    /// `--key-wcu`, ...; `shardline-local soak --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub soak_args: Vec<String>,
}

pub fn run(root: &Path, args: &SoakArgs) -> Result<()> {
    stand_in::ensure_venv(root)?;
    stand_in::ensure_dynalite(root)?;
    let bin = build_binary(root, "shardline-local", "shardline-local", Profile::Debug)?;
    let mut soak_args = vec!["soak"];
    soak_args.extend(args.soak_args.iter().map(String::as_str));
    run_step("soak", root, &bin.display().to_string(), &soak_args)
}
