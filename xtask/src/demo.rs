//! `cargo xtask demo`: the guided tour. It brings the local stack up, runs each act,
//! and always brings the stack down again, also on error and on Ctrl-C.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::local;
use crate::steps::{cargo, run_step};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Leave the stack running at the end (stop it with `cargo xtask local down`).
    #[arg(long)]
    pub keep: bool,
}

pub fn run(root: &Path, args: &DemoArgs) -> Result<()> {
    let interrupted = Arc::new(AtomicBool::new(false));
    let guard = StackGuard {
        root: root.to_path_buf(),
        keep: args.keep,
    };
    watch_ctrl_c(root, interrupted.clone())?;
    let stack = local::up(root, local::DEFAULT_PREFIX)?;
    println!(
        "== local stack at {} (tables {}, {}; queue {})",
        stack.endpoint, stack.table_name, stack.shard_table_name, stack.queue_url
    );
    let result = acts(root);
    drop(guard);
    if interrupted.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    result
}

fn acts(root: &Path) -> Result<()> {
    println!(
        "== the shard plan for the reference scenario (50,000 writes/s, hottest entity 2,000/s, 500-byte items)"
    );
    run_step(
        "plan",
        root,
        &cargo(),
        &[
            "run",
            "-q",
            "-p",
            "shardline",
            "--",
            "plan",
            "--global-wps",
            "50000",
            "--peak-entity-wps",
            "2000",
            "--item-bytes",
            "500",
        ],
    )
}

/// Brings the stack down when the demo ends, however it ends (Drop also runs while
/// an error or a panic unwinds).
#[derive(Debug)]
struct StackGuard {
    root: std::path::PathBuf,
    keep: bool,
}

impl Drop for StackGuard {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("stack left running; stop it with `cargo xtask local down`");
            return;
        }
        if let Err(e) = local::down(&self.root) {
            eprintln!("bringing the stack down failed: {e:#}");
        }
    }
}

/// On Ctrl-C, stop the recorded processes and exit: the main thread may be blocked
/// in a child process that the same signal ends.
fn watch_ctrl_c(root: &Path, interrupted: Arc<AtomicBool>) -> Result<()> {
    let root = root.to_path_buf();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal runtime")?;
    std::thread::Builder::new()
        .name("ctrl-c".into())
        .spawn(move || {
            runtime.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    interrupted.store(true, Ordering::SeqCst);
                    eprintln!("\ninterrupted: bringing the stack down");
                    if let Err(e) = local::down(&root) {
                        eprintln!("bringing the stack down failed: {e:#}");
                    }
                    std::process::exit(130);
                }
            });
        })
        .context("starting the Ctrl-C watcher")?;
    Ok(())
}
