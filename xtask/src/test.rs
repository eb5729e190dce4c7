//! `cargo xtask test`: what CI runs: fmt, clippy, every test (the soaks in block and slab
//! mode alone, after the others), `cargo xtask validate`, and a short run of each fuzz
//! target.

use std::path::Path;

use anyhow::Result;
use clap::Args;

use crate::steps::{cargo, run_step};

#[derive(Debug, Args)]
pub struct TestArgs {}

/// Seconds each fuzz target runs in `cargo xtask test`.
const FUZZ_SMOKE_SECS: u64 = 10;

pub fn run(root: &Path, _args: &TestArgs) -> Result<()> {
    // Install first, once, so parallel test binaries find everything ready.
    eprintln!("==> install: project-local moto venv, dynalite and the deploy tools");
    stand_in::ensure_venv(root)?;
    stand_in::ensure_dynalite(root)?;
    // cargo-lambda, for the `cargo lambda watch` tests (and SAM for `validate`).
    stand_in::ensure_deploy_venv(root)?;
    let cargo = cargo();
    run_step("fmt", root, &cargo, &["fmt", "--all", "--check"])?;
    run_step(
        "clippy",
        root,
        &cargo,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    run_step("test", root, &cargo, &["test", "--workspace"])?;
    // The soak in block mode reads a raised device's two lanes (two Queries a key, on
    // dynalite): beside the other end-to-end tests on two cores its hot-device read can
    // outrun its time budget, so it runs here, alone.
    run_step(
        "soak in block mode, alone",
        root,
        &cargo,
        &[
            "test",
            "-p",
            "e2e",
            "--test",
            "e2e",
            "--",
            "--ignored",
            "--exact",
            "soak::soak_in_block_mode_with_faults_and_two_kills",
        ],
    )?;
    // The soak in slab mode reads every device of its fleet at the end, through the
    // query API: alone too, for the same reason (about a minute and a half).
    run_step(
        "soak in slab mode, alone",
        root,
        &cargo,
        &[
            "test",
            "-p",
            "e2e",
            "--test",
            "e2e",
            "--",
            "--ignored",
            "--exact",
            "soak::soak_in_slab_mode_with_faults_and_two_kills",
        ],
    )?;
    crate::validate::run(root, &crate::validate::ValidateArgs::default())?;
    // The fuzz targets live in their own workspace: build each and run it briefly, so
    // a target that no longer compiles, or an input the seeds already break, fails here.
    crate::fuzz::run(
        root,
        &crate::fuzz::FuzzArgs {
            seconds: FUZZ_SMOKE_SECS,
            target: None,
        },
    )?;
    eprintln!("==> all checks passed");
    Ok(())
}
