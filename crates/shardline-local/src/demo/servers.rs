//! The servers of a run: the stand-in's installed tools, and each run's private moto
//! (SQS) and dynalite (DynamoDB), recorded in `.local/pids` and stopped when dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use stand_in::pids::PidRecord;
use tokio::task::JoinHandle;

use super::Variant;

/// Prefix of the pid files of the demo's servers (moto, dynalite): `demo-<pid>-...`.
pub const PID_PREFIX: &str = "demo-";

/// The stand-in's installed tools: moto's venv and dynalite's node packages.
#[derive(Debug, Clone)]
pub(super) struct Tools {
    venv: stand_in::Venv,
    node: stand_in::NodeTools,
}

impl Tools {
    /// Installs what is missing under `root` (a blocking task: it may download).
    pub(super) async fn install(root: &Path) -> anyhow::Result<Self> {
        let root = root.to_path_buf();
        tokio::task::spawn_blocking(move || -> anyhow::Result<Tools> {
            Ok(Tools {
                venv: stand_in::ensure_venv(&root)?,
                node: stand_in::ensure_dynalite(&root)?,
            })
        })
        .await
        .context("the install task failed")?
    }
}

/// A local server recorded in `.local/pids` (so `cargo xtask demo` can stop it even if
/// this process dies), stopped when dropped.
#[derive(Debug)]
pub(super) struct ServerGuard {
    root: PathBuf,
    record: PidRecord,
}

impl ServerGuard {
    /// Starts this run's moto (SQS) and dynalite (DynamoDB), side by side.
    pub(super) async fn start_pair(
        tools: &Tools,
        root: &Path,
        variant: Variant,
    ) -> anyhow::Result<(Self, Self)> {
        let venv = tools.venv.clone();
        let moto = Self::spawn(root, move || {
            stand_in::Moto::start(&venv)?.detach(&server_record_name("moto", variant))
        });
        let node = tools.node.clone();
        let dynalite = Self::spawn(root, move || {
            stand_in::Dynalite::start(&node)?.detach(&server_record_name("dynalite", variant))
        });
        let moto = moto.await.context("the moto task failed")??;
        let dynalite = dynalite.await.context("the dynalite task failed")??;
        Ok((moto, dynalite))
    }

    /// Starts a server on a blocking task (`start` waits until it answers).
    fn spawn(
        root: &Path,
        start: impl FnOnce() -> anyhow::Result<PidRecord> + Send + 'static,
    ) -> JoinHandle<anyhow::Result<Self>> {
        let root = root.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let record = start()?;
            Ok(Self { root, record })
        })
    }

    /// The server's URL.
    pub(super) fn endpoint(&self) -> anyhow::Result<String> {
        self.record
            .endpoint
            .clone()
            .with_context(|| format!("the {} record has no endpoint", self.record.name))
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        match self.record.stop(Duration::from_secs(5)) {
            Ok(_) => {
                let _ = std::fs::remove_file(self.record.path(&self.root));
                if let Some(log) = &self.record.log {
                    let _ = std::fs::remove_file(log);
                }
            }
            Err(e) => eprintln!(
                "cannot stop {} (pid {}): {e:#}",
                self.record.name, self.record.pid
            ),
        }
    }
}

/// The pid-file name of a demo server (`moto`, `dynalite`) of this process.
pub fn server_record_name(server: &str, variant: Variant) -> String {
    format!(
        "{PID_PREFIX}{}-{server}-{}",
        std::process::id(),
        variant.name()
    )
}
