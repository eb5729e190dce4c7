//! `shardline blocks`: turn blocks on (or off) for an existing table.
//!
//! A table's layout says whether writers pack one device's readings into blocks
//! (docs/design-blocks.md). A new table's layout packs them (`BLOCKS`, default on); a
//! stored layout is never changed by the writers' settings, so an existing table
//! switches here: the next layout, the latest with blocks on or off, is scheduled as a
//! table-layout epoch under the margin rule, through the shard directory the writers
//! read. Every writer's cache holds it before it is in force; a reading takes the
//! layout in force at its own timestamp, and readers read back the block window only
//! over spans whose layout packs blocks, so a read across the switch is exact.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Args;
use sharding::block::BlockLayout;
use store::clock::wall_clock;
use store::config::{Vars, WriterSettings};
use store::directory::ShardDirectory;
use store::directory::layout::ScheduledLayout;
use store::dynamo::DynamoShards;

use crate::env::StackArgs;

/// Flags of `shardline blocks`.
#[derive(Debug, Args)]
pub struct BlocksArgs {
    /// `on` packs one device's readings into blocks from the switch on; `off` writes an
    /// item a reading again.
    #[arg(value_parser = ["on", "off"])]
    pub switch: String,
    /// A block's longest span, seconds (1 to 3600): what a range read reads back.
    #[arg(long, default_value_t = 60)]
    pub window_secs: u32,
    /// The stack; the env file's margin applies, so the switch is in force only once
    /// every writer's cache can hold it.
    #[command(flatten)]
    pub stack: StackArgs,
}

/// Runs the command and prints what it scheduled.
pub async fn run(args: &BlocksArgs) -> anyhow::Result<()> {
    let blocks = match args.switch.as_str() {
        "on" => Some(
            BlockLayout {
                window_ms: args.window_secs.saturating_mul(1000),
                ..BlockLayout::default()
            }
            .checked()
            .context("bad --window-secs")?,
        ),
        _ => None,
    };
    let env = args.stack.env()?;
    let settings = WriterSettings::parse(&Vars(|name: &str| env.get(name)))
        .context("the writers' shard settings")?;
    let dynamo =
        aws_sdk_dynamodb::Client::new(&env.sdk_config(args.stack.endpoint_url.as_deref()).await);
    let directory = ShardDirectory::new(
        DynamoShards::new(&dynamo, &settings.shard_table_name),
        settings.directory,
    );
    let change = |latest: &sharding::layout::Layout| sharding::layout::Layout {
        blocks,
        ..latest.clone()
    };
    let said = match directory.schedule_layout(change, wall_clock()?).await? {
        ScheduledLayout::Scheduled(epoch) => format!(
            "blocks {} from {} (layout {})",
            args.switch, epoch.effective_from, epoch.value
        ),
        ScheduledLayout::Already(layout) => {
            format!(
                "blocks already {} (layout {layout}), nothing scheduled",
                args.switch
            )
        }
    };
    writeln!(std::io::stdout().lock(), "{said}").context("cannot write to stdout")?;
    Ok(())
}
