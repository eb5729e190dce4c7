//! Running child commands as named steps with streamed output.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs `program args` in `dir`, output streamed to the terminal; fails naming `step`.
pub fn run_step(step: &str, dir: &Path, program: &str, args: &[&str]) -> Result<()> {
    eprintln!("==> {step}: {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .status()
        .with_context(|| format!("step '{step}': could not start {program}"))?;
    if !status.success() {
        bail!(
            "step '{step}' failed ({program} {} exited with {status})",
            args.join(" ")
        );
    }
    Ok(())
}

/// The cargo that runs xtask (so toolchain overrides carry over).
pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}
