//! `cargo xtask bench`: the measurements of issue 8, regenerating `bench/REPORT.md`.
//!
//! Builds once in release (the two Lambda binaries and the bench program), runs the
//! criterion cost bench, then the bench program, which prints the table and writes the
//! report. Not part of `cargo xtask test`: it measures, it asserts nothing.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Options of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Reduced sizes and durations (a smoke run; the committed report is a full run).
    #[arg(long)]
    pub quick: bool,
}

fn run_step(what: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("==> {what}");
    let status = cmd.status().with_context(|| format!("starting: {what}"))?;
    if !status.success() {
        bail!("{what} failed with {status}");
    }
    Ok(())
}

fn cargo(root: &Path) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    cmd.current_dir(root);
    cmd
}

pub fn run(root: &Path, args: &BenchArgs) -> Result<()> {
    run_step(
        "release build of ingest, query and shardline-bench",
        cargo(root).args([
            "build",
            "--release",
            "-p",
            "ingest",
            "-p",
            "query",
            "-p",
            "shardline-bench",
        ]),
    )?;
    let mut criterion = cargo(root);
    // The release profile, so the build above is reused (the bench profile would build
    // the whole dependency tree a second time).
    criterion.args([
        "bench",
        "--profile",
        "release",
        "-p",
        "shardline-bench",
        "--bench",
        "cost",
        "--",
    ]);
    if args.quick {
        criterion.args(["--warm-up-time", "1", "--measurement-time", "2"]);
    }
    run_step("criterion: cost per reading", &mut criterion)?;
    let target = root.join("target");
    let mut bench = Command::new(target.join("release/shardline-bench"));
    bench
        .current_dir(root)
        .arg("--report")
        .arg(root.join("bench/REPORT.md"))
        .arg("--release-dir")
        .arg(target.join("release"))
        .arg("--criterion-dir")
        .arg(target.join("criterion"))
        .arg("--command")
        .arg(if args.quick {
            "cargo xtask bench --quick"
        } else {
            "cargo xtask bench"
        });
    if args.quick {
        bench.arg("--quick");
    }
    run_step("benchmarks (items 1-6)", &mut bench)
}
