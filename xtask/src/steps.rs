//! Running child commands as named steps with streamed output.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs `program args` in `dir`, output streamed to the terminal; fails naming `step`.
pub fn run_step(step: &str, dir: &Path, program: &str, args: &[&str]) -> Result<()> {
    run_command(step, Command::new(program).args(args).current_dir(dir))
}

/// Runs a prepared command, output streamed to the terminal; fails naming `step`.
pub fn run_command(step: &str, command: &mut Command) -> Result<()> {
    let shown = format!(
        "{} {}",
        command.get_program().to_string_lossy(),
        command
            .get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    eprintln!("==> {step}: {shown}");
    let status = command
        .status()
        .with_context(|| format!("step '{step}': could not start {shown}"))?;
    if !status.success() {
        bail!("step '{step}' failed ({shown} exited with {status})");
    }
    Ok(())
}

/// The workspace's target directory (`CARGO_TARGET_DIR` when set).
pub fn target_dir(root: &Path) -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// The cargo that runs xtask (so toolchain overrides carry over).
pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// The cargo profile a binary is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The one `cargo xtask test` already built.
    Debug,
    Release,
}

/// Builds `package`'s binary `bin` with `profile` and returns its path in the
/// workspace's target directory.
pub fn build_binary(
    root: &Path,
    package: &str,
    bin: &str,
    profile: Profile,
) -> Result<std::path::PathBuf> {
    let mut args = vec!["build", "--package", package, "--bin", bin];
    if profile == Profile::Release {
        args.push("--release");
    }
    run_step(&format!("build {bin}"), root, &cargo(), &args)?;
    let dir = match profile {
        Profile::Debug => "debug",
        Profile::Release => "release",
    };
    let path = target_dir(root).join(dir).join(bin);
    if !path.is_file() {
        bail!("{} was not built", path.display());
    }
    Ok(path)
}
