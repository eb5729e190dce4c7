//! `shardline`: the Shardline command line. Each subcommand lives in its own module
//! (`plan` here, the others in the library so the demo and tests share them).

use clap::{Parser, Subcommand};
use shardline::{audit, demo, fanout, heatmap, provision, publish, run_local, soak};

mod capacity;

/// Shardline: high-velocity time-series ingestion into DynamoDB without hot partitions.
#[derive(Debug, Parser)]
#[command(name = "shardline", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Size the table-level shard count N and a hot entity's fan-out k from write rates.
    Plan(capacity::PlanArgs),
    /// Simulate devices: send readings (and malformed messages) to the SQS queue.
    Publish(publish::PublishArgs),
    /// Run the queue's event source mapping and the query API locally, in process.
    RunLocal(run_local::RunLocalArgs),
    /// Schedule a known-hot device's fan-out ahead of its load.
    Fanout(fanout::FanoutArgs),
    /// Audit partition keys of a write sample or a table: cardinality, shares, peaks.
    Audit(audit::AuditArgs),
    /// Draw per-key WCU over time from a capacity-proxy heat CSV as a PNG.
    Heatmap(heatmap::HeatmapArgs),
    /// The reference scenario twice, naive vs adaptive layout, side by side.
    Demo(demo::DemoArgs),
    /// Fault and crash soak: private moto, capacity-proxy, run-local SIGKILLed and restarted.
    Soak(soak::SoakArgs),
    /// Create template.yaml's tables and queues on a local stand-in, write its env file.
    Provision(provision::ProvisionArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => capacity::run(&args),
        Command::Heatmap(args) => heatmap::run(&args),
        Command::Publish(args) => runtime()?.block_on(publish::run(&args)),
        Command::RunLocal(args) => {
            init_tracing();
            runtime()?.block_on(run_local::run(&args))
        }
        Command::Fanout(args) => runtime()?.block_on(fanout::run(&args)),
        Command::Audit(args) => runtime()?.block_on(audit::run(&args)),
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
