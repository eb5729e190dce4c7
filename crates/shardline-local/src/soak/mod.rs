//! `shardline-local soak`: the whole pipeline under faults and crashes, checked against the
//! publisher's manifest (docs/reliability.md scenarios 14 and 16, and the query API under load).
//!
//! As the demo: a private moto for SQS and dynalite for DynamoDB, `capacity-proxy` in
//! front of dynalite (unprocessed items, HTTP 500s, latency, a per-key write cap so hot
//! devices throttle), `shardline-local run-local` as a child process that is SIGKILLed
//! at seeded moments and restarted (each start appending to one received log), the
//! publisher, and a reader paging the query API. Afterwards the table must hold
//! exactly the valid readings (no duplicate, none missing), the DLQ exactly the
//! malformed messages, each with its reason, and each message the publisher had
//! accepted must have been received and stored or dead-lettered: one never received
//! is named as the stand-in's loss. [`run`] returns a [`Report`]; its `violations`
//! list what broke.
//!
//! [`run`] reads as the soak's steps; the modules hold them:
//! - `config`: the flags, the [`SoakConfig`], the publisher's plan;
//! - `services`: the private moto, dynalite and the proxy;
//! - `child`: run-local as a child process, its kills and restarts;
//! - `traffic`: the publisher, and the drain after it;
//! - `reader`: the reader of the query API and its page checks;
//! - `checks`: the table, the final read, the DLQ and each message against the
//!   manifest;
//! - `slabs`: in slab mode, the table by tier and every device's read against the
//!   manifest;
//! - `report`: the [`Report`] and its summary.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// When the soak's first progress line was printed (its lines carry seconds since).
static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// A progress line on stderr, after the seconds since the first one, when `$verbose`.
macro_rules! say {
    ($verbose:expr, $($arg:tt)*) => {
        if $verbose {
            eprintln!(
                "soak {:>7.1}: {}",
                $crate::soak::T0.get_or_init(std::time::Instant::now).elapsed().as_secs_f64(),
                format!($($arg)*)
            );
        }
    };
}

mod checks;
mod child;
mod config;
mod reader;
mod report;
mod services;
mod slabs;
mod traffic;

pub use config::{HOT_DEVICE, SLAB_FLEET, SLAB_FLEET_RATE, SoakArgs, SoakConfig, soak_plan};
pub use reader::ReaderStats;
pub use report::{KillMoment, Report};
pub use slabs::SlabFigures;

use child::ChildSpec;
use config::publishing_period;
use reader::Reader;
use services::Services;
use traffic::Publisher;

/// The command: the soak with the current executable as run-local.
pub async fn run_command(args: &SoakArgs) -> anyhow::Result<()> {
    let root = std::env::current_dir().context("no current directory")?;
    let root = stand_in::repo_root_from(&root)?;
    let bin = std::env::current_exe().context("cannot locate the shardline binary")?;
    let mut config = SoakConfig::new(root, bin, args.messages, args.kills, args.seed);
    config.drain_timeout = Duration::from_secs(args.drain_timeout);
    config.key_wcu = args.key_wcu;
    config.batch = usize::from(args.batch);
    if args.slabs {
        config = config.in_slab_mode();
    }
    config.verbose = true;
    let report = run(&config).await?;
    println!("{}", report.text());
    if !report.violations.is_empty() {
        bail!("the soak found {} violations", report.violations.len());
    }
    Ok(())
}

/// Runs the soak. Errors are failures to run it at all; broken promises are in the
/// report's `violations`.
pub async fn run(cfg: &SoakConfig) -> anyhow::Result<Report> {
    let started = Instant::now();
    let prefix = format!("soak-{}-{}", std::process::id(), cfg.seed);
    let services = Services::start(cfg, &prefix).await?;
    let dir = cfg.root.join(".local/soak");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let spec = ChildSpec::prepare(cfg, &services.stack, &services.proxy.url(), &dir, &prefix)?;
    let manifest_path = dir.join(format!("{prefix}.manifest.jsonl"));
    let (sqs, queue_url) = (&services.sqs, &services.stack.queue_url);

    let mut report = Report {
        dynamodb: services.dynamodb(),
        slab_mode: cfg.slabs,
        ..Report::default()
    };
    let child = spec.start(report.starts).await?;
    report.starts += 1;
    // The reader pages the API while everything else runs; the kills follow the
    // publisher's progress.
    let publish_start = store::clock::wall_clock()?;
    let reader = Reader::spawn(
        spec.query,
        publish_start.as_millis(),
        cfg.seed,
        cfg.read_devices(),
    );
    let publisher = Publisher::spawn(cfg, sqs, queue_url, publish_start, &manifest_path);
    let mut child = child::kill_and_restart(cfg, &spec, child, &publisher, &mut report).await?;
    publisher.finish(cfg, &mut report).await?;

    let drain_start = Instant::now();
    let drained = traffic::drain(cfg, sqs, queue_url, &mut child, &dir, &mut report).await?;
    report.drain_secs = drain_start.elapsed().as_secs_f64();
    say!(cfg.verbose, "drained; stopping the reader");
    let seen = reader.finish(&mut report).await?;
    say!(
        cfg.verbose,
        "the reader stopped; checking the table, the final read and the DLQ"
    );

    checks::verify(
        &services,
        &spec,
        child,
        &manifest_path,
        (&seen, drained),
        &mut report,
    )
    .await?;
    report.duration_secs = started.elapsed().as_secs_f64();
    // Files of a passing soak are not needed; a failing one keeps its logs and manifest.
    if report.violations.is_empty() {
        let _ = std::fs::remove_file(&manifest_path);
        spec.remove_files(report.starts);
    }
    services.stop().await?;
    Ok(report)
}

/// The first `n` characters of `s`.
fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
