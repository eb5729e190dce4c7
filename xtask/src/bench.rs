//! `cargo xtask bench`: the measurements, regenerating `bench/REPORT.md`.
//!
//! Builds once in release (the two Lambda binaries and the bench program), runs the
//! criterion cost bench, then the bench program, which prints the table and writes the
//! report (`bench/REPORT.md`, its other items' rows kept) and adds the run to
//! `bench/HISTORY.md`. Not part of `cargo xtask test`: it measures, it asserts nothing.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::steps::{cargo, run_command, target_dir};

/// Options of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Reduced sizes and durations (a smoke run; the committed report is a full run).
    #[arg(long)]
    pub quick: bool,
    /// Run only these items (1 to 10, repeatable). The report's other rows stay, each
    /// naming the run it came from.
    #[arg(long)]
    pub only: Vec<u8>,
    /// Days of one device's readings, one a second, that item 4's stats figure reads
    /// page by page (default 4; 31 is a month, 2.7 M readings to seed).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=31))]
    pub stats_days: Option<u16>,
}

pub fn run(root: &Path, args: &BenchArgs) -> Result<()> {
    run_command(
        "release build of ingest, query and shardline-bench",
        Command::new(cargo()).current_dir(root).args([
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
    let wants = |item: u8| args.only.is_empty() || args.only.contains(&item);
    if wants(6) {
        // Item 6 lists each Lambda binary's largest crates.
        run_command(
            "cargo-bloat (item 6)",
            Command::new(cargo()).current_dir(root).args([
                "install",
                "cargo-bloat",
                "--locked",
                "--version",
                "0.12.1",
            ]),
        )?;
    }
    if wants(5) {
        let mut criterion = Command::new(cargo());
        criterion.current_dir(root);
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
            "--bench",
            "cost_system",
            "--",
        ]);
        if args.quick {
            criterion.args(["--warm-up-time", "1", "--measurement-time", "2"]);
        }
        run_command("criterion: cost per reading", &mut criterion)?;
    }
    // Every run writes the committed report: a partial one replaces its own items' rows
    // and keeps the others, each naming the run it came from (`bench/HISTORY.md` gets
    // the run's entry).
    let report = root.join("bench/REPORT.md");
    let mut command_line = "cargo xtask bench".to_owned();
    if args.quick {
        command_line.push_str(" --quick");
    }
    for item in &args.only {
        command_line.push_str(&format!(" --only {item}"));
    }
    if let Some(days) = args.stats_days {
        command_line.push_str(&format!(" --stats-days {days}"));
    }
    let target = target_dir(root);
    let mut bench = Command::new(target.join("release/shardline-bench"));
    bench
        .current_dir(root)
        .arg("--report")
        .arg(&report)
        .arg("--release-dir")
        .arg(target.join("release"))
        .arg("--criterion-dir")
        .arg(target.join("criterion"))
        .arg("--command")
        .arg(&command_line);
    if args.quick {
        bench.arg("--quick");
    }
    for item in &args.only {
        bench.arg("--only").arg(item.to_string());
    }
    if let Some(days) = args.stats_days {
        bench.arg("--stats-days").arg(days.to_string());
    }
    run_command("benchmarks", &mut bench)
}
