//! `cargo xtask demo`: installs the stand-in if missing, builds `shardline-local`, and runs
//! `shardline-local demo` (the reference scenario, naive vs adaptive layout, one report).
//! Every process the demo starts is stopped, also on Ctrl-C or error: `shardline-local demo`
//! stops its own servers, and records each moto in `.local/pids/demo-<pid>-*.pid`, which
//! this command stops afterwards in case the child could not.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use stand_in::pids;

use crate::steps::{Profile, build_binary};

/// How long the child gets to stop its servers after Ctrl-C before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Build `shardline-local` with the release profile (the debug build keeps up on this
    /// machine: moto, not the Rust side, bounds the rates).
    #[arg(long)]
    pub release: bool,
    /// Further `shardline-local demo` flags, e.g. `-- --duration 30 --hot-rate 1000`.
    #[arg(last = true, allow_hyphen_values = true)]
    pub demo_args: Vec<String>,
}

pub fn run(root: &Path, args: &DemoArgs) -> Result<()> {
    let profile = if args.release {
        Profile::Release
    } else {
        Profile::Debug
    };
    // The stand-in's install (moto's Python venv, about 30 s the first time, and
    // dynalite's node packages) runs while shardline-local builds; cargo's own progress shows
    // the build.
    eprintln!(
        "==> build shardline-local and install the stand-in, side by side (a first build takes \
         about 2 min on 2 cores, a later one seconds)"
    );
    let (binary, (venv, node)) = std::thread::scope(|scope| {
        let install = scope.spawn(|| {
            let venv = stand_in::ensure_venv(root)?;
            let node = stand_in::ensure_dynalite(root)?;
            anyhow::Ok((venv, node))
        });
        let built = build_binary(root, "shardline-local", "shardline-local", profile);
        let tools = install
            .join()
            .map_err(|_| anyhow::anyhow!("the stand-in's install panicked"))?
            .context("installing the stand-in");
        anyhow::Ok((built?, tools?))
    })?;
    eprintln!(
        "==> stand-in: {} and {}",
        venv.dir().display(),
        node.dynalite_cli().display()
    );

    let interrupted = Arc::new(AtomicBool::new(false));
    watch_ctrl_c(interrupted.clone())?;
    eprintln!("==> shardline-local demo {}", args.demo_args.join(" "));
    let started = Instant::now();
    let child = Command::new(&binary)
        .arg("demo")
        .args(&args.demo_args)
        .current_dir(root)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let mut guard = ChildGuard {
        root: root.to_path_buf(),
        child,
    };
    let status = guard.wait(&interrupted);
    drop(guard);
    eprintln!(
        "==> demo wall time {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if interrupted.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    let status = status?;
    if !status.success() {
        bail!("shardline-local demo failed ({status})");
    }
    Ok(())
}

/// The `shardline-local demo` child: waited for, told to stop on Ctrl-C, killed if it does
/// not, and its recorded servers stopped when this guard drops (on error and panic too).
#[derive(Debug)]
struct ChildGuard {
    root: std::path::PathBuf,
    child: Child,
}

impl ChildGuard {
    fn wait(&mut self, interrupted: &AtomicBool) -> Result<std::process::ExitStatus> {
        let pid = self.child.id();
        let mut told: Option<Instant> = None;
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .context("waiting for shardline-local")?
            {
                return Ok(status);
            }
            if interrupted.load(Ordering::SeqCst) {
                match told {
                    None => {
                        // A terminal's Ctrl-C reaches the child too; a signal sent to
                        // xtask alone does not, so pass it on.
                        let _ = Command::new("kill")
                            .args(["-TERM", &pid.to_string()])
                            .status();
                        told = Some(Instant::now());
                    }
                    Some(at) if at.elapsed() > STOP_GRACE => {
                        let _ = Command::new("kill")
                            .args(["-KILL", &pid.to_string()])
                            .status();
                    }
                    Some(_) => {}
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The child's moto servers, if it could not stop them itself.
        let prefix = format!("demo-{}-", self.child.id());
        match pids::recorded(&self.root) {
            Ok(records) => {
                for record in records.iter().filter(|r| r.name.starts_with(&prefix)) {
                    match record.stop(Duration::from_secs(5)) {
                        Ok(_) => {
                            let _ = std::fs::remove_file(record.path(&self.root));
                        }
                        Err(e) => eprintln!("cannot stop {}: {e:#}", record.name),
                    }
                }
            }
            Err(e) => eprintln!("cannot read the pid files: {e:#}"),
        }
    }
}

/// Ctrl-C sets `interrupted` instead of ending xtask, so the guard can clean up.
fn watch_ctrl_c(interrupted: Arc<AtomicBool>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal runtime")?;
    std::thread::Builder::new()
        .name("ctrl-c".into())
        .spawn(move || {
            runtime.block_on(async {
                while tokio::signal::ctrl_c().await.is_ok() {
                    interrupted.store(true, Ordering::SeqCst);
                    eprintln!("\ninterrupted: stopping the demo");
                }
            });
        })
        .context("starting the Ctrl-C watcher")?;
    Ok(())
}
