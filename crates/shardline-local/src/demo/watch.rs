//! A run's traffic as it happens: publishing the scenario's stream, then draining the
//! queue, with a progress line every 5 s.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use capacity_proxy::StatsSnapshot;
use indicatif::ProgressBar;

use super::{Scenario, Variant};
use crate::publish::{self, SendOptions, Summary};
use crate::run_local::{self, Stats};

/// How long the queue must look settled while SQS still counts messages in flight:
/// longer than a receive takes between SQS marking its messages and the runner counting
/// them, on a loaded machine.
const SETTLE: Duration = Duration::from_secs(3);

/// Messages received and still in the runner's hands: not yet deleted (a message
/// written, dead-lettered, split or requeued is deleted after its invocation's fates
/// are recorded), nor reported or failed to delete (those come back after their wait).
fn unsettled(stats: &Stats) -> u64 {
    stats
        .messages
        .saturating_sub(stats.deleted + stats.failures_reported + stats.delete_failures)
}

/// One progress line of `variant`'s run at `t`.
fn progress_line(variant: Variant, t: Duration, runner: &Stats, proxy: &StatsSnapshot) -> String {
    format!(
        "  [{}] t={:>4.0}s  messages received {:>7}  readings written {:>8}  throttled {:>7}  fan-out raises {}",
        variant.name(),
        t.as_secs_f64(),
        runner.messages,
        runner.readings_written,
        proxy.throttled_by_reason.values().sum::<u64>(),
        runner.fanout_raises,
    )
}

/// One run's publishing and draining, with a progress line every 5 s.
pub(super) struct Watch<'a> {
    pub(super) scenario: &'a Scenario,
    pub(super) variant: Variant,
    pub(super) running: &'a run_local::Running,
    pub(super) proxy: &'a capacity_proxy::ProxyHandle,
    pub(super) t0: Instant,
}

impl Watch<'_> {
    fn say_progress(&self, stats: &Stats) {
        self.scenario.say(progress_line(
            self.variant,
            self.t0.elapsed(),
            stats,
            &self.proxy.stats(),
        ));
    }

    /// Publishes the scenario's plan to `queue_url` from `start` on, the manifest of
    /// what SQS accepted written to `manifest`.
    pub(super) async fn publish(
        &self,
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
        start: sharding::time::Timestamp,
        manifest: &Path,
    ) -> anyhow::Result<Summary> {
        let hidden = ProgressBar::hidden();
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(manifest)
                .with_context(|| format!("cannot create {}", manifest.display()))?,
        );
        let sent = {
            let publishing = publish::publish(
                sqs,
                queue_url,
                self.scenario.plan(0),
                start,
                SendOptions::default(),
                &hidden,
                Some(&mut file),
            );
            tokio::pin!(publishing);
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            tick.tick().await;
            loop {
                tokio::select! {
                    sent = &mut publishing => break sent?,
                    _ = tick.tick() => self.say_progress(&self.running.stats()),
                }
            }
        };
        std::io::Write::flush(&mut file)
            .with_context(|| format!("cannot write {}", manifest.display()))?;
        self.scenario.say(format!(
            "  [{}] published: {}",
            self.variant.name(),
            sent.text().replace('\n', "; ")
        ));
        Ok(sent)
    }

    /// Waits until nothing is visible and no invocation holds messages (what is left
    /// then waits out the visibility timeout), at most the scenario's drain time;
    /// returns how long it waited and whether the queue emptied.
    ///
    /// A message SQS counts in flight while the runner holds none may be one a receive
    /// has taken and not yet handed back: the drain calls the queue settled only once
    /// that picture has held, with no message received, for [`SETTLE`].
    pub(super) async fn drain(
        &self,
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
    ) -> anyhow::Result<(Duration, bool)> {
        let drain_start = Instant::now();
        let mut last_say = Instant::now();
        let mut quiet_since: Option<(Instant, u64)> = None;
        while drain_start.elapsed() < self.scenario.drain {
            let (visible, invisible) = run_local::queue_counts(sqs, queue_url).await?;
            let stats = self.running.stats();
            if visible == 0 && unsettled(&stats) == 0 {
                if invisible == 0 {
                    return Ok((drain_start.elapsed(), true));
                }
                match quiet_since {
                    Some((since, received)) if received == stats.messages => {
                        if since.elapsed() >= SETTLE {
                            return Ok((drain_start.elapsed(), false));
                        }
                    }
                    _ => quiet_since = Some((Instant::now(), stats.messages)),
                }
            } else {
                quiet_since = None;
            }
            if last_say.elapsed() >= Duration::from_secs(5) {
                self.say_progress(&stats);
                last_say = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok((drain_start.elapsed(), false))
    }
}
