//! The sealer on its schedule: one run every `--seal-every` seconds, in process, with
//! the same code and variables as the Lambda, until the runner stops.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use parking_lot::Mutex;
use sealer::{Config, DynamoSealer};
use shardline::env::EnvLookup;
use tokio::sync::watch;

use super::Stats;

/// Starts the schedule where `env` names a rollups table; without one, nothing.
pub(super) fn spawn(
    env: &EnvLookup,
    dynamo: &aws_sdk_dynamodb::Client,
    every: Duration,
    mut stop: watch::Receiver<bool>,
    stats: Arc<Mutex<Stats>>,
) -> anyhow::Result<()> {
    if env.get("ROLLUP_TABLE").is_none() {
        return Ok(());
    }
    let config = Config::from_lookup(|name| env.get(name)).context("sealer configuration")?;
    let sealer = DynamoSealer::on_dynamo(dynamo, &config);
    tokio::spawn(async move {
        // The first run at the start: a table with slabs and no compaction progress
        // writes no slab until a run has set one.
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            let Ok(now) = store::clock::wall_clock() else {
                continue;
            };
            let deadline = std::time::Instant::now() + every.max(Duration::from_secs(30));
            let started = std::time::Instant::now();
            let run = sealer.run(now, Some(deadline)).await;
            stats.lock().bill("sealer", started.elapsed());
            match run {
                Ok(report) => tracing::info!(?report, "sealer run"),
                Err(e) => tracing::warn!(error = %e, "sealer run failed; the next run goes on"),
            }
        }
    });
    Ok(())
}
