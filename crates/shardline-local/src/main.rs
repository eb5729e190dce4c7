//! `shardline-local`: the local harness's command line. Each subcommand lives in the
//! library, so `cargo xtask` and the tests drive the same code. The operator's commands
//! (plan, fanout, audit) are the `shardline` binary.

use clap::{Parser, Subcommand};
use shardline_local::{demo, heatmap, provision, publish, run_local, soak};

/// Shardline's local harness: the device simulator, the Lambdas in one process, the
/// demo, the soak and the heat map, against a stand-in on loopback.
#[derive(Debug, Parser)]
#[command(name = "shardline-local", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate devices: send readings (and malformed messages) to the SQS queue.
    Publish(publish::PublishArgs),
    /// Run the queue's event source mapping and the query API locally, in process.
    RunLocal(run_local::RunLocalArgs),
    /// Draw per-key WCU over time from a capacity-proxy heat CSV as a PNG.
    Heatmap(heatmap::HeatmapArgs),
    /// The reference scenario twice, naive vs adaptive layout, side by side.
    Demo(demo::DemoArgs),
    /// Fault and crash soak: private moto (SQS) and dynalite (DynamoDB), capacity-proxy,
    /// run-local SIGKILLed and restarted.
    Soak(soak::SoakArgs),
    /// Create template.yaml's tables and queues on a local stand-in, write its env file.
    Provision(provision::ProvisionArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Heatmap(args) => heatmap::run(&args),
        Command::Publish(args) => runtime()?.block_on(publish::run(&args)),
        Command::RunLocal(args) => {
            init_tracing();
            runtime()?.block_on(run_local::run(&args))
        }
        Command::Demo(args) => {
            init_tracing_to_file(&args.log_path(&stand_in::repo_root()?))?;
            runtime()?.block_on(demo::run_command(&args))
        }
        Command::Soak(args) => runtime()?.block_on(soak::run_command(&args)),
        Command::Provision(args) => runtime()?.block_on(provision::run(&args)),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Logs to stderr, `RUST_LOG` filtered (default: warnings), so stdout carries only
/// the address line and the summary.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Logs to `path` instead of the terminal, `RUST_LOG` filtered (default: warnings): the
/// demo's terminal shows only its progress and its report.
fn init_tracing_to_file(path: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .init();
    Ok(())
}
