//! `shardline seal`: rebuild the derived items (device-hours, summaries, fleet parts,
//! directory entries) of a range of hours from the readings.
//!
//! The same code as the sealer's `reseal` event (`sealer::Sealer::rebuild`), run from
//! the operator's machine without a deadline: each hour is read once through the read
//! plan over every device and the merge, and written with the sealer's conditional
//! writes, so a rebuild run twice, run beside the scheduled sealer, or stopped and run
//! again leaves the items one clean run leaves. Afterwards the watermark covers the
//! rebuilt hours where that keeps it true (`sealer::Sealer::extend_watermark`): a lost
//! rollups table gets one; an existing one's first hour moves back over rebuilt hours
//! that reach it.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;
use sealer::{Config, DynamoSealer};
use sharding::time::Timestamp;
use store::clock::wall_clock;

use crate::env::StackArgs;

/// Flags of `shardline seal`.
#[derive(Debug, Args)]
pub struct SealArgs {
    /// The first hour to rebuild: RFC 3339 or epoch milliseconds (its hour is taken).
    #[arg(long, value_parser = at)]
    pub from: i64,
    /// The end of the range, exclusive: RFC 3339 or epoch milliseconds.
    #[arg(long, value_parser = at)]
    pub to: i64,
    /// The stack: TABLE_NAME, SHARD_TABLE_NAME and ROLLUP_TABLE (and the sealer's own
    /// settings, LATENESS_HORIZON_SECS and RETENTION_DAYS) from the environment or the
    /// env file.
    #[command(flatten)]
    pub stack: StackArgs,
}

/// A time flag: RFC 3339 or epoch milliseconds (`sharding::time::parse_bound`).
fn at(text: &str) -> Result<i64, String> {
    sharding::time::parse_bound(text)
        .map(Timestamp::as_millis)
        .map_err(|why| format!("{text:?} is neither RFC 3339 nor epoch ms ({why})"))
}

/// Runs the command against the stack's tables and prints a line per hour, then the
/// watermark.
pub async fn run(args: &SealArgs) -> anyhow::Result<()> {
    let env = args.stack.env()?;
    let config = Config::from_lookup(|name| env.get(name)).context("the sealer's settings")?;
    let dynamo = aws_sdk_dynamodb::Client::new(&args.stack.sdk_config(&env).await);
    let sealer = DynamoSealer::on_dynamo(&dynamo, &config);
    let mut out = std::io::stdout().lock();
    anyhow::ensure!(
        args.from < args.to,
        "--from ({}) is not before --to ({}): nothing to rebuild",
        args.from,
        args.to
    );
    let mut written = Ok(());
    let rebuilt = sealer
        .rebuild(args.from, args.to, wall_clock()?, None, |hour, report| {
            if written.is_ok() {
                written = writeln!(
                    out,
                    "{}: {} readings, {} device-hours written, {} already so, {} fleet parts written",
                    store::rollup::hour_label(hour),
                    report.readings,
                    report.device_hours_written,
                    report.device_hours_unchanged,
                    report.parts_written,
                );
            }
        })
        .await?;
    written.context("cannot write to stdout")?;
    let said = match rebuilt.watermark {
        Some(m) => format!(
            "sealed {} hours ({} readings); the watermark covers {} to {}",
            rebuilt.report.hours_sealed,
            rebuilt.report.readings,
            store::rollup::hour_label(m.from_ms),
            store::rollup::hour_label(m.end_ms),
        ),
        None => format!(
            "sealed {} hours ({} readings); no watermark (nothing due yet)",
            rebuilt.report.hours_sealed, rebuilt.report.readings,
        ),
    };
    writeln!(out, "{said}").context("cannot write to stdout")?;
    Ok(())
}
