//! `cargo xtask local up|down|status|install`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Subcommand;
use stand_in::pids::{self, StopOutcome};
use stand_in::{Moto, Service, ensure_dynalite, ensure_venv, read_env_file};

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
        /// A template parameter in place of its default (repeatable), e.g.
        /// `--parameter TimeIndex=enabled`.
        #[arg(long = "parameter")]
        parameters: Vec<String>,
        #[command(flatten)]
        capacity: CapacityArgs,
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
        LocalCommand::Up {
            prefix,
            parameters,
            capacity,
        } => {
            let endpoint = up(root, &prefix, &parameters)?;
            if capacity.capacity {
                let proxy = start_capacity_proxy(root, &endpoint, &capacity)?;
                point_env_at_proxy(&env_path(root), &proxy)?;
            }
            print_env(&env_path(root))?;
            eprintln!("stand-in up at {endpoint} (stop it with `cargo xtask local down`)");
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

/// Name of the capacity proxy's pid file in `.local/pids`.
pub const CAPACITY_PROXY: &str = "capacity-proxy";

/// `local up --capacity`: put the hot-partition emulator in front of moto.
#[derive(Debug, Clone, clap::Args)]
pub struct CapacityArgs {
    /// Start capacity-proxy in front of moto; AWS_ENDPOINT_URL then points at the proxy
    /// and MOTO_URL at moto itself.
    #[arg(long)]
    pub capacity: bool,
    /// Write capacity units per second per partition-key value.
    #[arg(long, default_value_t = 1000.0, requires = "capacity")]
    pub key_wcu: f64,
    /// Per-(second, PK) heat CSV for `shardline-local heatmap`.
    #[arg(long, requires = "capacity")]
    pub heat_csv: Option<PathBuf>,
    /// Further capacity-proxy flags, e.g. `--proxy-arg=--latency-ms=10`.
    #[arg(long = "proxy-arg", requires = "capacity", allow_hyphen_values = true)]
    pub proxy_args: Vec<String>,
}

/// Builds and starts capacity-proxy (detached, recorded in `.local/pids`) in front of
/// `upstream`; returns its endpoint.
pub fn start_capacity_proxy(root: &Path, upstream: &str, args: &CapacityArgs) -> Result<String> {
    if let Some(running) = pids::recorded(root)?
        .into_iter()
        .find(|r| r.name == CAPACITY_PROXY && r.is_alive())
    {
        // Its flags may differ from the ones asked for now: restart rather than guess.
        running.stop(Duration::from_secs(10))?;
    }
    let program = crate::steps::build_binary(
        root,
        "capacity-proxy",
        "capacity-proxy",
        crate::steps::Profile::Debug,
    )?;
    let upstream = upstream.to_owned();
    let key_wcu = args.key_wcu.to_string();
    let heat_csv = args.heat_csv.clone();
    let extra = args.proxy_args.clone();
    let service = Service::start(root, "capacity-proxy", &program, move |port| {
        let mut argv = vec![
            "--listen".to_owned(),
            format!("127.0.0.1:{port}"),
            "--upstream".to_owned(),
            upstream.clone(),
            "--key-wcu".to_owned(),
            key_wcu.clone(),
        ];
        if let Some(path) = &heat_csv {
            argv.push("--heat-csv".to_owned());
            argv.push(path.display().to_string());
        }
        argv.extend(extra.iter().cloned());
        argv
    })?;
    let record = service.detach(CAPACITY_PROXY)?;
    record
        .endpoint
        .context("capacity-proxy record without endpoint")
}

/// Rewrites AWS_ENDPOINT_URL in the env file to the proxy, keeping every other line.
fn point_env_at_proxy(path: &Path, proxy: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with("AWS_ENDPOINT_URL=") {
            out.push_str(&format!("AWS_ENDPOINT_URL={proxy}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// `.local/stack.env`.
pub fn env_path(root: &Path) -> PathBuf {
    root.join(".local/stack.env")
}

/// Brings the stack up (moto detached, resources created by `shardline-local provision`, env
/// file written) and returns moto's endpoint. If a recorded moto still runs, it is
/// reused so `up` twice does not leak servers.
pub fn up(root: &Path, prefix: &str, parameters: &[String]) -> Result<String> {
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
    // Creating resources takes the AWS SDK, which xtask does not build: shardline-local does.
    let shardline = crate::steps::build_binary(
        root,
        "shardline-local",
        "shardline-local",
        crate::steps::Profile::Debug,
    )?;
    let env_file = env_path(root);
    crate::steps::run_command(
        "provision",
        std::process::Command::new(shardline)
            .current_dir(root)
            .args(["provision", "--endpoint", &endpoint, "--prefix", prefix])
            .arg("--env-file")
            .arg(&env_file)
            .arg(format!("--env=MOTO_URL={endpoint}"))
            .args(parameters.iter().map(|p| format!("--parameter={p}"))),
    )?;
    Ok(endpoint)
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
