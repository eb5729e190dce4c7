//! `shardline audit`: which partition keys take too many writes, or would.
//!
//! Input is a sample of writes, one per line (`{"pk": ..., "ts": ...}` or a full
//! item), or a scan of a table. The analysis ([`audit`]) is pure: per key it counts
//! writes and WCU (from each item's size, DynamoDB's 1 KB rule), finds the busiest
//! second, and projects how much the key will hold over its life. A key is flagged
//! when
//! - its peak WCU/s (times `--scale`, for growth) passes the partition limit
//!   (`--partition-wcu`, 1,000), or
//! - its projected size passes one partition's ~10 GB: a key without a time bucket
//!   keeps receiving writes for the whole retention, a time-bucketed key
//!   (`OPS_LOG#2026-06-22`, `s07#2026-06-22T13`) only for its bucket. So a log table
//!   keyed by one constant (cardinality 1) is flagged with numbers, even at a rate
//!   far below the partition limit.
//!
//! A day bucket does not lower a key's per-second peak: at 1,500 writes/s today's
//! `OPS_LOG#<day>` is as hot as `OPS_LOG`, and the audit says so.
//!
//! It also counts readings stored twice ([`count_duplicates`]): fan-out keys nest, so a
//! reading written, then redelivered after a raise, can sit under two partition keys
//! with one sort key; two slabs can hold one reading (a batch written twice), and a slab
//! or run and the device's own item can (a run and the slabs it was compacted from
//! count once). Reads show it once; the copies still cost storage and WCU. The
//! count needs each item's sort key (`sk`/`SK` in a sample line, `--sk-attribute` in a
//! scan); a reading is identified by its sort key, qualified by its entity where the
//! sort key does not hold it ([`reading_identity`]).
//!
//! # Layout
//! - `analysis`: the pure audit of a sample ([`audit`], [`audit_sampled`]);
//! - `keys`: a key's time bucket and pattern;
//! - `duplicates`: readings stored under two partition keys;
//! - `report`: the human report ([`AuditReport::text`]);
//! - `sample`: the lines of a JSONL sample;
//! - `scan`: a table's items, through `store`'s scan port ([`scan_table`]);
//!
//! and here, the command's flags and its run.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use sharding::capacity::PARTITION_WCU;
use store::scan::{DynamoScan, ScanAttributes};

use crate::env::StackArgs;

mod analysis;
mod duplicates;
mod keys;
mod report;
mod sample;
mod scan;

pub use analysis::{
    AuditConfig, AuditReport, KeyReport, PARTITION_BYTES, PatternReport, Sampled, Write, audit,
    audit_sampled,
};
pub use duplicates::{DuplicateReport, count_duplicates, reading_identity};
pub use keys::{TimeBucket, key_pattern};
pub use sample::{parse_line, parse_sampled, read_sample};
pub use scan::scan_table;

/// Flags of `shardline audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// A JSONL sample of writes (`-` for stdin).
    #[arg(long, conflicts_with = "table")]
    pub sample: Option<PathBuf>,
    /// Scan this table instead.
    #[arg(long)]
    pub table: Option<String>,
    #[command(flatten)]
    pub stack: StackArgs,
    /// Partition key attribute of the scanned table.
    #[arg(long, default_value = "PK")]
    pub pk_attribute: String,
    /// Sort key attribute of the scanned table (readings stored under two keys are
    /// counted by it).
    #[arg(long, default_value = "SK")]
    pub sk_attribute: String,
    /// Timestamp attribute of the scanned table (epoch ms number or RFC 3339 string).
    #[arg(long, default_value = "ts_ms")]
    pub ts_attribute: String,
    /// Stop the scan after this many items.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Item size for sample lines that carry only a key and a timestamp, bytes.
    #[arg(long, default_value_t = 500)]
    pub item_bytes: usize,
    /// Partition write limit, WCU/s.
    #[arg(long, default_value_t = PARTITION_WCU)]
    pub partition_wcu: f64,
    /// Item retention, days: a key without a time bucket grows this long.
    #[arg(long, default_value_t = 30.0)]
    pub retention_days: f64,
    /// Multiply the sample's rates by this (projected growth).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Flag keys projected to hold more than this many GiB over their life (0: off).
    #[arg(long, default_value_t = 10.0)]
    pub max_key_gb: f64,
    /// Keys and patterns to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The command. Exit status 0 also with flags: the `FLAG` lines say it.
pub async fn run(args: &AuditArgs) -> anyhow::Result<()> {
    if !(args.partition_wcu > 0.0 && args.scale > 0.0 && args.retention_days > 0.0) {
        bail!("--partition-wcu, --scale and --retention-days must be positive");
    }
    if !(args.max_key_gb >= 0.0 && args.max_key_gb.is_finite()) {
        bail!("--max-key-gb must be a non-negative number");
    }
    let sample = match (&args.sample, &args.table) {
        (Some(path), _) if path.as_os_str() == "-" => {
            read_sample(std::io::stdin().lock(), args.item_bytes)?
        }
        (Some(path), _) => read_sample(
            std::io::BufReader::new(
                std::fs::File::open(path)
                    .with_context(|| format!("cannot open {}", path.display()))?,
            ),
            args.item_bytes,
        )?,
        (None, Some(table)) => scan(args, table).await?,
        (None, None) => bail!("give --sample FILE or --table NAME"),
    };
    let config = AuditConfig {
        partition_wcu: args.partition_wcu,
        partition_bytes: args.max_key_gb * 1024.0 * 1024.0 * 1024.0,
        retention_days: args.retention_days,
        scale: args.scale,
        top: args.top,
    };
    let report = audit_sampled(&sample, &config);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).context("cannot encode the report")?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", report.text())?;
    }
    Ok(())
}

/// The sample a scan of `table` on the stack gives, under the flags' attribute names
/// and limit.
async fn scan(args: &AuditArgs, table: &str) -> anyhow::Result<Vec<Sampled>> {
    let env = args.stack.env()?;
    let sdk = args.stack.sdk_config(&env).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let attributes = ScanAttributes {
        pk: args.pk_attribute.clone(),
        sk: args.sk_attribute.clone(),
        ts: args.ts_attribute.clone(),
    };
    scan_table(&DynamoScan::new(client, table), &attributes, args.limit)
        .await
        .map_err(|e| anyhow!("cannot scan {table}: {e}"))
}
