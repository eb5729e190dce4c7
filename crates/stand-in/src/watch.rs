//! Cargo run from a process cargo started (a test, `cargo run`), and `cargo lambda
//! watch` serving a function on loopback, stopped with its children on drop.

use std::ffi::OsStr;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::Venv;

/// Variables cargo sets for a process it runs, which a cargo that process runs in
/// turn must not inherit: they would change build-script fingerprints and rebuild
/// dependencies.
fn set_by_cargo_for_its_child(name: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
        || matches!(
            name,
            "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR" | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// A command running `program` (cargo, or a tool that runs it) without the variables
/// cargo set for this process.
pub fn cargo_command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if set_by_cargo_for_its_child(&name) {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// What [`LambdaWatch::start`] serves, and how.
#[derive(Debug)]
pub struct WatchSpec<'a> {
    /// The function's package and binary.
    pub package: &'a str,
    pub bin: &'a str,
    /// The loopback port of its invoke API.
    pub port: u16,
    /// The function's variables.
    pub env_file: &'a Path,
    /// Where watch's output goes.
    pub log: PathBuf,
    /// Builds with `--release`.
    pub release: bool,
}

/// `cargo lambda watch` in its own process group, killed with its children (cargo, the
/// function) on drop.
#[derive(Debug)]
pub struct LambdaWatch {
    child: Child,
    log: PathBuf,
    port: u16,
    started: Instant,
}

impl LambdaWatch {
    /// Serves `spec`'s function from the workspace at `root`, building into
    /// `target_dir`.
    pub fn start(venv: &Venv, root: &Path, target_dir: &Path, spec: WatchSpec<'_>) -> Result<Self> {
        let WatchSpec {
            package,
            bin,
            port,
            env_file,
            log,
            release,
        } = spec;
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let started = Instant::now();
        let child = cargo_command(venv.bin("cargo-lambda"))
            .args(["lambda", "watch", "--package", package, "--bin", bin])
            .args(release.then_some("--release"))
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(port.to_string())
            // The binary is fixed: no reload on file changes.
            .arg("--ignore-changes")
            // Through the environment: cargo-lambda 1.9 also hands `--target-dir` to
            // `cargo metadata`, which refuses it.
            .env("CARGO_TARGET_DIR", target_dir)
            .arg("--env-file")
            .arg(env_file)
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .context("starting cargo lambda watch")?;
        Ok(Self {
            child,
            log,
            port,
            started,
        })
    }

    /// What it printed so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits, checking every `poll`, until the emulator accepts connections; returns
    /// the time since [`LambdaWatch::start`]. Fails when watch exits or `limit` passes.
    pub async fn wait_listening(&mut self, limit: Duration, poll: Duration) -> Result<Duration> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "cargo lambda watch exited with {status}:\n{}",
                    self.log_text()
                );
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(self.started.elapsed());
            }
            if self.started.elapsed() >= limit {
                bail!(
                    "cargo lambda watch did not listen on {addr} within {limit:?}:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(poll).await;
        }
    }
}

impl Drop for LambdaWatch {
    fn drop(&mut self) {
        // The whole group: cargo-lambda, the cargo it runs and the function binary.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
