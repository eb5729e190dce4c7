//! `shardline-local demo`: the reference scenario (a hot sensor at twice its key's write
//! limit beside a Zipf fleet), scaled to the machine, run twice on identical load, and
//! one side-by-side report.
//!
//! Each run gets its own private moto for SQS, its own dynalite for DynamoDB, an
//! in-process `capacity-proxy` in front of dynalite (per-key write limit, its own heat
//! CSV) and the local runner (ingest and query in process). The publisher and the
//! runner reach moto's SQS directly; ingest and query reach DynamoDB through the proxy.
//! dynalite, not moto, holds the tables because it keeps each partition's items in key
//! order, so a Query reads one key's range as DynamoDB does; moto answers every Query
//! by scanning the whole table, which made the demo's reads take tens of seconds.
//!
//! 1. The naive layout (`SHARD_STRATEGY=unsharded`, `PK = device`): the hot device is
//!    one partition key and is capped at the per-key limit.
//! 2. Adaptive hybrid: time buckets over N table shards sized by the planner for the
//!    scaled rates, with the hot device's fan-out k starting at 1 and raised by the
//!    ingest when it sees key-range throttles. Once its readings are written, its
//!    dashboard: the run's hours sealed by a reseal (they have not ended), then the
//!    latest readings and the device count through the query API, the fleet's readings
//!    per minute from the fleet parts, and the hot device's series (`series.png`).
//!
//! The throttled backlog of run 1 is not waited out: messages the handler reported come
//! back only after the queue's visibility timeout, so after a bounded drain period the
//! report says what is still queued.
//!
//! [`run`] reads as the demo's steps; the modules hold them:
//! - `args`, `scenario`: the flags, and the [`Scenario`] they describe;
//! - `servers`: the stand-in's tools, each run's moto and dynalite;
//! - `variant`: one run on one layout, from its servers to its [`RunReport`];
//! - `watch`: publishing and draining, with progress lines;
//! - `measure`: the reads through the query API, the table, the heatmap;
//! - `dashboard`, `series`: run 2's dashboard (its hours resealed, read back through
//!   the API and the sealer's items) and the hot device's series picture;
//! - `bill`: the run's whole bill, counted and scaled to a month, beside the model's;
//! - `report`: the reports and their side-by-side text, then the dashboard.

mod args;
mod bill;
mod dashboard;
mod measure;
mod one_reading;
mod report;
mod scenario;
mod series;
mod servers;
mod variant;
mod watch;

use std::io::Write as _;
use std::time::Instant;

use anyhow::{Context as _, bail};

pub use crate::query_api::FanoutEpoch;
pub use args::{DEFAULT_OUT_DIR, DemoArgs, HOT_DEVICE, LOG_FILE};
pub use bill::{COUNTED, Counted, RunBill, deviation};
pub use dashboard::{
    Dashboard, DeviceCount, FleetCells, Latest, LatestReading, SERIES_FILE, SERIES_METRIC, Series,
    Timings,
};
pub use measure::{FLEET_DEVICE, QueryResult};
pub use one_reading::OneReadingFleet;
pub use report::{DemoReport, RunReport, report_text};
pub use scenario::{IngestTuning, Scenario, settings_text};
pub use servers::{PID_PREFIX, server_record_name};
pub use variant::Variant;

use servers::Tools;
use variant::run_variant;

/// The command: runs the demo (stopping everything on Ctrl-C or SIGTERM), prints the
/// report and writes it to `<out-dir>/report.txt`.
pub async fn run_command(args: &DemoArgs) -> anyhow::Result<()> {
    let root = stand_in::repo_root()?;
    let scenario = args.scenario(&root)?;
    let report = tokio::select! {
        report = run(&scenario) => report?,
        () = crate::signal::stop_requested() => {
            // Dropping the demo's future stops the runner and proxy and stops its servers.
            bail!("interrupted: every process of the demo was stopped");
        }
    };
    let text = report_text(&report);
    let path = scenario.out_dir.join("report.txt");
    std::fs::write(&path, format!("{text}\n"))
        .with_context(|| format!("cannot write {}", path.display()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    writeln!(out, "Report written to {}", path.display())?;
    writeln!(
        out,
        "Logs of the handler and the runner: {}",
        args.log_path(&root).display()
    )?;
    Ok(())
}

/// Runs both variants and returns the report.
pub async fn run(scenario: &Scenario) -> anyhow::Result<DemoReport> {
    let started = Instant::now();
    let plan = scenario.capacity_plan()?;
    std::fs::create_dir_all(&scenario.out_dir)
        .with_context(|| format!("cannot create {}", scenario.out_dir.display()))?;
    scenario.say(settings_text(scenario, &plan));
    let tools = Tools::install(&scenario.root).await?;
    // The runs share nothing but the machine (each has its own servers, proxy and
    // runner), so they run side by side: the demo takes one run's time, not two.
    let (naive, adaptive) = tokio::try_join!(
        run_variant(scenario, &plan, &tools, Variant::Naive),
        run_variant(scenario, &plan, &tools, Variant::Adaptive),
    )?;
    // After the two runs, so it does not share the machine with them.
    let one_reading = match scenario.one_reading {
        Some(publish_for) => Some(
            one_reading::run(scenario, publish_for)
                .await
                .map_err(|e| format!("{e:#}")),
        ),
        None => None,
    };
    Ok(DemoReport {
        scenario: scenario.clone(),
        plan,
        naive,
        adaptive,
        one_reading,
        elapsed: started.elapsed(),
    })
}
