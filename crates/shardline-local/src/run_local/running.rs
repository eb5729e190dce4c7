//! The handle of a started runner: its query address, its counters, and the stop.

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use anyhow::Context as _;
use tokio::sync::watch;

use super::Stats;

/// A running runner.
#[derive(Debug)]
pub struct Running {
    pub(super) query_addr: Option<SocketAddr>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) stats: Arc<Mutex<Stats>>,
    pub(super) task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Where the query API listens.
    pub fn query_addr(&self) -> Option<SocketAddr> {
        self.query_addr
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let mut stats = self.stats.lock().clone();
        stats.finish();
        stats
    }

    /// Asks the runner to stop: no new receives; batches in flight are finished.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// A handle that can stop the runner from elsewhere (a signal task).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// Waits until the runner ended (after [`Running::stop`] or when idle).
    pub async fn wait(self) -> anyhow::Result<Stats> {
        self.task.await.context("the runner task failed")??;
        let mut stats = self.stats.lock().clone();
        stats.finish();
        Ok(stats)
    }
}
