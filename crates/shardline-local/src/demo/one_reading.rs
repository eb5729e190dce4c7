//! The demo's one-reading phase: a fleet whose devices send one reading a message, run
//! twice side by side on identical load, today's layout and slabs (`SLABS=on`), each on
//! its own servers, proxy and runner (`crate::one_reading`). It shows what slabs are
//! for: today each such reading costs at least a write unit; in a slab, a fraction.

use std::time::Duration;

use sharding::capacity::MONTH_SECS;
use shardline::cost::{Key, PriceTable};

use super::Scenario;
use crate::one_reading::{FleetFigures, FleetRun};

/// The phase's fleet: this many devices, each a reading every [`EVERY`].
const DEVICES: usize = 300;
const EVERY: Duration = Duration::from_secs(10);
/// One message in this many has its time to readable measured.
const SAMPLE_ONE_IN: usize = 10;
/// The event source of today's layout: the template's batching window and batch size.
const TODAY_WINDOW: Duration = Duration::from_secs(1);
const TODAY_BATCH: usize = 100;
/// The event source the template gives slabs (`SlabBatchingWindow`,
/// `SlabIngestBatchSize`): a longer window and a larger batch, so one invocation
/// gathers more devices' readings into each slab.
const SLAB_WINDOW: Duration =
    Duration::from_secs(crate::run_local::DEFAULT_SLAB_BATCHING_WINDOW_SECS as u64);
const SLAB_BATCH: usize = crate::run_local::DEFAULT_SLAB_BATCH_SIZE;

/// Both runs of the phase.
#[derive(Debug, Clone)]
pub struct OneReadingFleet {
    /// The settings of each run, today's layout first.
    pub runs: [FleetRun; 2],
    /// What each measured, in the same order.
    pub figures: [FleetFigures; 2],
}

/// The phase's two runs for `scenario`, publishing for `publish_for`.
fn runs(scenario: &Scenario, publish_for: Duration) -> [FleetRun; 2] {
    let run = |slabs: bool, batching_window, batch_size| FleetRun {
        root: scenario.root.clone(),
        prefix: format!(
            "demo-{}-one-{}",
            std::process::id(),
            if slabs { "slabs" } else { "today" }
        ),
        devices: DEVICES,
        every: EVERY,
        publish_for,
        sample_one_in: SAMPLE_ONE_IN,
        slabs,
        batching_window,
        batch_size,
        max_concurrency: scenario.max_concurrency,
    };
    [
        run(false, TODAY_WINDOW, TODAY_BATCH),
        run(true, SLAB_WINDOW, SLAB_BATCH),
    ]
}

/// Runs the phase: both layouts side by side.
pub(super) async fn run(
    scenario: &Scenario,
    publish_for: Duration,
) -> anyhow::Result<OneReadingFleet> {
    let runs = runs(scenario, publish_for);
    scenario.say(format!(
        "== one-reading fleet, two runs side by side: {}",
        runs[0].words()
    ));
    let (today, slabs) = tokio::try_join!(runs[0].run(), runs[1].run())?;
    Ok(OneReadingFleet {
        runs,
        figures: [today, slabs],
    })
}

/// The phase's section of the report.
pub(super) fn text(phase: &Result<OneReadingFleet, String>) -> String {
    let phase = match phase {
        Ok(phase) => phase,
        Err(why) => return format!("One-reading fleet: not measured: {why}"),
    };
    let price = PriceTable::built_in().map(|p| p.get(Key::DynamodbWriteRequestUnits).clone());
    let mut s = format!(
        "One-reading fleet: {} devices, one reading a message every {} s each ({:.0} readings/s), {} s, today's layout beside slabs\n",
        DEVICES,
        EVERY.as_secs(),
        phase.runs[0].rate(),
        phase.runs[0].publish_for.as_secs(),
    );
    for (run, f) in phase.runs.iter().zip(&phase.figures) {
        // A tier with no write prints 0.000, never the -0.000 a difference of equal
        // counts gives.
        let per = |x: f64| {
            let v = x / f.sent.max(1) as f64;
            if v == 0.0 { 0.0 } else { v }
        };
        let month = match &price {
            Ok(price) => format!(
                "${:.2}",
                price.of(f.wcu_per_reading() * run.rate() * MONTH_SECS)
            ),
            Err(e) => format!("not priced: {e:#}"),
        };
        let ms =
            |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()));
        s.push_str(&format!(
            "  {} (event source: {} s window, batch {}, {} pollers)\n\
             \x20   write units a reading: {:.3} (slabs s# {:.3}, runs r# {:.3}, own items {:.3}); shard and rollup tables {:.0} WCU in all\n\
             \x20   bytes stored a reading: {:.0} (slabs {:.0}, runs {:.0}, own items {:.0}; slabs until they expire)\n\
             \x20   DynamoDB writes a month at this rate: {month}\n\
             \x20   readings a slab: {}; compaction: {}\n\
             \x20   the fleet's minutes (GET /stats fresh_to): {}\n\
             \x20   time from SendMessage to readable: p50 {}, p99 {}, max {} ({} sampled, {} never read); {} messages, queue {}\n",
            run.layout_words(),
            run.batching_window.as_secs_f64(),
            run.batch_size,
            run.max_concurrency,
            f.wcu_per_reading(),
            per(f.slab_wcu),
            per(f.run_wcu),
            per(f.own_wcu),
            f.other_wcu,
            f.bytes_per_reading(),
            per(f.slab_bytes),
            per(f.run_bytes),
            per(f.own_bytes),
            f.readings_a_slab().map_or("-".to_owned(), |n| format!("{n:.1}")),
            compaction_words(run, f),
            fresh_words(f),
            ms(f.quantile(0.5)),
            ms(f.quantile(0.99)),
            ms(f.latencies.last().copied()),
            f.latencies.len(),
            f.never_read,
            f.sent,
            if f.drained { "drained" } else { "NOT drained" },
        ));
    }
    s
}

/// How far the fleet's fresh minutes trailed now, in words.
fn fresh_words(f: &FleetFigures) -> String {
    match f.fresh_lag_range() {
        Some((least, most)) => format!(
            "{} s to {} s behind now ({} polls)",
            least.as_secs(),
            most.as_secs(),
            f.fresh_lags.len()
        ),
        None => "none during the run (they move at the hour's seal)".to_owned(),
    }
}

/// Whether the run's windows were compacted into runs, in words.
fn compaction_words(run: &FleetRun, f: &FleetFigures) -> &'static str {
    match (run.slabs, f.compacted()) {
        (false, _) => "none (no slabs)",
        (true, true) => "ran: runs (r#) written",
        (true, false) => {
            "no runs written within the phase (a window is compacted once closed, about 2 min after its end)"
        }
    }
}
