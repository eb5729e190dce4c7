//! The soak's traffic: the publisher (writing the manifest of what it sent) with the
//! queue's depth printed beside it, then the wait for the queue to drain.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::ProgressBar;
use tokio::process::Child;
use tokio::task::JoinHandle;

use super::{Report, SoakConfig, publishing_period, soak_plan};
use crate::publish::{self, Plan, SendOptions};
use crate::run_local;

/// The publisher's task, its progress, and the queue-depth lines printed while it runs.
pub(super) struct Publisher {
    task: JoinHandle<anyhow::Result<(publish::Summary, Duration)>>,
    monitor: JoinHandle<()>,
    /// Counts the messages sent (never drawn).
    progress: ProgressBar,
    /// The messages the plan holds, and the schedule it spreads them over.
    messages: u64,
    period: Duration,
    started: Instant,
}

impl Publisher {
    /// Publishes the soak's plan to `queue_url` from `start` on, the manifest written
    /// to `manifest`.
    pub(super) fn spawn(
        cfg: &SoakConfig,
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
        start: sharding::time::Timestamp,
        manifest: &Path,
    ) -> Self {
        let plan = soak_plan(cfg);
        let messages = plan.messages();
        let progress = ProgressBar::hidden();
        let task = tokio::spawn(publish_to(
            sqs.clone(),
            queue_url.to_owned(),
            plan,
            start,
            cfg.max_queued,
            manifest.to_path_buf(),
            progress.clone(),
        ));
        // Queue depth while publishing, for the progress lines.
        let monitor = tokio::spawn(watch_queue(sqs.clone(), queue_url.to_owned(), cfg.verbose));
        Self {
            task,
            monitor,
            progress,
            messages,
            period: publishing_period(cfg),
            started: Instant::now(),
        }
    }

    /// Messages sent so far.
    pub(super) fn sent(&self) -> u64 {
        self.progress.position()
    }

    /// Time since the publisher started.
    pub(super) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether the publisher has come to `moment` of its schedule: sent the share of
    /// its messages the schedule sends by then (they are spread evenly over it), or
    /// finished. It falls behind the clock when moto's SQS holds it back.
    pub(super) fn has_reached(&self, moment: Duration) -> bool {
        self.task.is_finished()
            || u128::from(self.sent()) * self.period.as_nanos()
                >= moment.as_nanos() * u128::from(self.messages)
    }

    /// Waits until everything is sent, and records it in `report`.
    pub(super) async fn finish(self, cfg: &SoakConfig, report: &mut Report) -> anyhow::Result<()> {
        let (summary, publish_elapsed) = self.task.await.context("the publisher task")??;
        self.monitor.abort();
        report.publish_secs = publish_elapsed.as_secs_f64();
        say!(cfg.verbose, "published: {}", summary.text());
        report.record_sent(&summary);
        Ok(())
    }
}

/// Publishes `plan` to `queue_url` from `start` on, keeping at most `max_queued`
/// messages queued and counting each message sent on `progress`, and writes the
/// manifest of what was sent to `manifest`; returns the summary and how long it took.
async fn publish_to(
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    plan: Plan,
    start: sharding::time::Timestamp,
    max_queued: u64,
    manifest: PathBuf,
    progress: ProgressBar,
) -> anyhow::Result<(publish::Summary, Duration)> {
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&manifest)
            .with_context(|| format!("creating {}", manifest.display()))?,
    );
    let t = Instant::now();
    let summary = publish::publish(
        &sqs,
        &queue_url,
        plan,
        start,
        SendOptions {
            max_queued: Some(max_queued),
            ..SendOptions::default()
        },
        &progress,
        Some(&mut file),
    )
    .await?;
    std::io::Write::flush(&mut file).context("writing the manifest")?;
    Ok((summary, t.elapsed()))
}

/// Prints the queue's depth every 5 s (when `verbose`), until aborted.
async fn watch_queue(sqs: aws_sdk_sqs::Client, queue_url: String, verbose: bool) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if let Ok((visible, hidden)) = run_local::queue_counts(&sqs, &queue_url).await {
            say!(
                verbose,
                "publishing; queue {visible} visible, {hidden} in flight"
            );
        }
    }
}

/// Waits until both counts of the source queue are zero several polls in a row (moto
/// moves a message to the DLQ when it is received once too often; a requeued copy
/// counts while it is delayed), at most `cfg.drain_timeout`; returns whether it
/// drained. A run-local that exits on its own fails the soak.
pub(super) async fn drain(
    cfg: &SoakConfig,
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    child: &mut Child,
    dir: &Path,
    report: &mut Report,
) -> anyhow::Result<bool> {
    let drain_start = Instant::now();
    let mut quiet = 0;
    loop {
        let (visible, hidden) = run_local::queue_counts(sqs, queue_url).await?;
        if visible == 0 && hidden == 0 {
            quiet += 1;
            if quiet >= 3 {
                return Ok(true);
            }
        } else {
            quiet = 0;
        }
        if drain_start.elapsed() > cfg.drain_timeout {
            report.violations.push(format!(
                "the queue did not drain within {:?}: {visible} visible, {hidden} in flight",
                cfg.drain_timeout
            ));
            return Ok(false);
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "run-local exited on its own ({status}); log in {}",
                dir.display()
            );
        }
        say!(
            cfg.verbose,
            "draining: {visible} visible, {hidden} in flight or delayed"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
