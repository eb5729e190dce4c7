//! `cargo xtask local up|down|status|install`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Subcommand;
use stand_in::pids::{self, StopOutcome};
use stand_in::{Moto, Stack, ensure_dynalite, ensure_venv, provision, read_env_file};

/// Name of moto's pid file in `.local/pids`.
pub const MOTO: &str = "moto";
/// Default prefix of local resource names.
pub const DEFAULT_PREFIX: &str = "shardline-local";

#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Start moto on a free loopback port, create the template's tables and queues,
    /// write .local/stack.env.
    Up {
        /// Prefix of the local resource names (`{prefix}-{LogicalId}`).
        #[arg(long, default_value = DEFAULT_PREFIX)]
        prefix: String,
    },
    /// Stop every process recorded in .local/pids.
    Down,
    /// Show which recorded processes are alive, and where they listen.
    Status,
    /// Install the Python venv (moto) and the Node packages (dynalite) into .local.
    Install,
}

pub fn run(root: &Path, command: LocalCommand) -> Result<()> {
    match command {
        LocalCommand::Up { prefix } => {
            let stack = up(root, &prefix)?;
            print_env(&env_path(root))?;
            eprintln!(
                "stand-in up at {} (stop it with `cargo xtask local down`)",
                stack.endpoint
            );
            Ok(())
        }
        LocalCommand::Down => down(root),
        LocalCommand::Status => status(root),
        LocalCommand::Install => {
            let venv = ensure_venv(root)?;
            let node = ensure_dynalite(root)?;
            println!("venv: {}", venv.dir().display());
            println!("dynalite: {}", node.dynalite_cli().display());
            Ok(())
        }
    }
}

/// `.local/stack.env`.
pub fn env_path(root: &Path) -> PathBuf {
    root.join(".local/stack.env")
}

/// Brings the stack up (moto detached, resources created, env file written). If a
/// recorded moto still runs, it is reused so `up` twice does not leak servers.
pub fn up(root: &Path, prefix: &str) -> Result<Stack> {
    let venv = ensure_venv(root)?;
    let running = pids::recorded(root)?
        .into_iter()
        .find(|r| r.name == MOTO && r.is_alive());
    let endpoint = match running.and_then(|r| r.endpoint) {
        Some(endpoint) => {
            eprintln!("reusing running moto at {endpoint}");
            endpoint
        }
        None => {
            let moto = Moto::start(&venv)?;
            let record = moto.detach(MOTO)?;
            record.endpoint.context("moto record without endpoint")?
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    let stack = runtime
        .block_on(provision(&endpoint, &root.join("template.yaml"), prefix))
        .with_context(|| format!("provisioning template.yaml on {endpoint}"))?;
    stack.write_env_with(
        &env_path(root),
        &[("MOTO_URL".to_owned(), endpoint.clone())],
    )?;
    Ok(stack)
}

/// Stops every recorded process and removes the env file.
pub fn down(root: &Path) -> Result<()> {
    let stopped = pids::stop_all(root, Duration::from_secs(10))?;
    if stopped.is_empty() {
        println!("nothing recorded in {}", pids::pid_dir(root).display());
    }
    for (record, outcome) in stopped {
        let what = match outcome {
            StopOutcome::Stopped => "stopped",
            StopOutcome::NotRunning => "was not running",
        };
        println!("{} (pid {}) {what}", record.name, record.pid);
    }
    match std::fs::remove_file(env_path(root)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).context("removing .local/stack.env"),
    }
}

fn status(root: &Path) -> Result<()> {
    let records = pids::recorded(root)?;
    if records.is_empty() {
        println!("no recorded processes (start them with `cargo xtask local up`)");
    }
    for r in &records {
        let state = if r.is_alive() { "running" } else { "dead" };
        let endpoint = r.endpoint.as_deref().unwrap_or("-");
        let log = r
            .log
            .as_ref()
            .map_or_else(|| "-".to_owned(), |l| l.display().to_string());
        println!(
            "{:<16} pid {:<8} {state:<8} {endpoint}  log {log}",
            r.name, r.pid
        );
    }
    let env = env_path(root);
    if env.is_file() {
        println!("{}:", env.display());
        print_env(&env)?;
    }
    Ok(())
}

fn print_env(path: &Path) -> Result<()> {
    // Parse first so a damaged file is reported, then print it in file order.
    read_env_file(path)?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    print!("{text}");
    Ok(())
}
