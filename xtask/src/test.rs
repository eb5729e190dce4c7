//! `cargo xtask test`: what CI runs (ending with `cargo xtask validate`).

use std::path::Path;

use anyhow::Result;
use clap::Args;

use crate::steps::{cargo, run_step};

#[derive(Debug, Args)]
pub struct TestArgs {}

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
    crate::validate::run(root, &crate::validate::ValidateArgs::default())?;
    eprintln!("==> all checks passed");
    Ok(())
}
