//! `cargo xtask ...`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Each command lives in its own module; later issues add `bench`, `soak` and `fuzz`
//! next to these, and `demo` grows with the project.

mod bench;
mod demo;
mod fuzz;
mod local;
mod soak;
mod steps;
mod test;
mod validate;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Shardline project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The local stand-in (moto on loopback) and the processes it runs.
    Local {
        #[command(subcommand)]
        command: local::LocalCommand,
    },
    /// Everything CI checks: fmt, clippy, every test of the workspace, template validation.
    Test(test::TestArgs),
    /// Offline template checks: cfn-lint, sam validate --lint, sam build (x86_64).
    Validate(validate::ValidateArgs),
    /// The main job end to end: naive vs adaptive layout under the same burst, a time
    /// range read back through the API, one side-by-side report and two heatmaps.
    Demo(demo::DemoArgs),
    /// The benchmarks: prints a table and regenerates bench/REPORT.md.
    Bench(bench::BenchArgs),
    /// Fault and crash soak through run-local, checked against the publisher's manifest.
    Soak(soak::SoakArgs),
    /// Runs every cargo-fuzz target for --seconds each (installs cargo-fuzz if missing).
    Fuzz(fuzz::FuzzArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = stand_in::repo_root()?;
    match cli.command {
        Command::Local { command } => local::run(&root, command),
        Command::Test(args) => test::run(&root, &args),
        Command::Validate(args) => validate::run(&root, &args),
        Command::Demo(args) => demo::run(&root, &args),
        Command::Bench(args) => bench::run(&root, &args),
        Command::Soak(args) => soak::run(&root, &args),
        Command::Fuzz(args) => fuzz::run(&root, &args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_flags_pass_through_to_shardline_soak() {
        let cli = Cli::try_parse_from(["cargo xtask", "soak", "--messages", "200", "--kills", "1"])
            .expect("parses");
        let Command::Soak(args) = cli.command else {
            panic!("a soak command: {cli:?}");
        };
        assert_eq!(args.soak_args, ["--messages", "200", "--kills", "1"]);
    }
}
